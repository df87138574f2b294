-- moveToFinished (emqsim.protocol.Queue.finish): with the token check, a missing or foreign lock rejects
-- the completion (-2 "Missing lock", -6 "Lock mismatch", -3 "not in the active state").
-- KEYS[1] active, KEYS[2] stalled, KEYS[3] completed
-- ARGV[1] key prefix "emq:{queue}:", ARGV[2] job id, ARGV[3] token, ARGV[4] "1" to check the token,
-- ARGV[5] "1" to remove a completed job (its hash deleted, its id not added to completed)
-- Returns {code, was_active (1/0)}.
local id = ARGV[2]
local check = ARGV[4] == "1"
if check then
  local lock = ARGV[1] .. id .. ":lock"
  local current = redis.call("GET", lock)
  if not current then
    return {-2, 0}
  end
  if current ~= ARGV[3] then
    return {-6, 0}
  end
  redis.call("DEL", lock)
  redis.call("SREM", KEYS[2], id)
end
local removed = redis.call("LREM", KEYS[1], -1, id)
if removed == 0 then
  if check then
    return {-3, 0}
  end
  -- Unchecked: the ack is accepted, but the job is no longer active, so nothing else changes.
  return {0, 0}
end
if ARGV[5] == "1" then
  redis.call("DEL", ARGV[1] .. id)
else
  redis.call("SADD", KEYS[3], id)
end
return {0, 1}
