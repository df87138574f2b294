-- extendLocks (emqsim.protocol.Queue.extend_locks): token-checked renewal of many locks in one call.
-- KEYS[1] stalled
-- ARGV[1] key prefix "emq:{queue}:", ARGV[2] lock duration in ms, ARGV[3] "1" to recreate a missing lock,
-- ARGV[4], ARGV[5], ... pairs of job id and token
-- Returns the ids whose renewal failed.
local recreate = ARGV[3] == "1"
local failed = {}
for i = 4, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local lock = ARGV[1] .. id .. ":lock"
  local current = redis.call("GET", lock)
  if current == token or (recreate and not current) then
    redis.call("SET", lock, token, "PX", ARGV[2])
    redis.call("SREM", KEYS[1], id)
  else
    failed[#failed + 1] = id
  end
end
return failed
