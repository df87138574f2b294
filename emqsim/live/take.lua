-- moveToActive (emqsim.protocol.Queue.take): `wait` -> `active`, lock the job with the taker's token,
-- count the attempt, stamp processedOn with the caller's clock.
-- KEYS[1] wait, KEYS[2] active
-- ARGV[1] key prefix "emq:{queue}:", ARGV[2] token, ARGV[3] now (ms),
-- ARGV[4] lock duration in ms ("" = a lock without expiry), ARGV[5] "1" to set the lock, "0" not to
-- Returns the job id, or nil when `wait` is empty.
local id = redis.call("LMOVE", KEYS[1], KEYS[2], "RIGHT", "LEFT")
if not id then
  return false
end
if ARGV[5] == "1" then
  local lock = ARGV[1] .. id .. ":lock"
  if ARGV[4] == "" then
    redis.call("SET", lock, ARGV[2])
  else
    redis.call("SET", lock, ARGV[2], "PX", ARGV[4])
  end
end
local job = ARGV[1] .. id
redis.call("HINCRBY", job, "ats", 1)
redis.call("HSET", job, "processedOn", ARGV[3])
return id
