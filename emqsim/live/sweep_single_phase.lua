-- One-pass stalled sweep (emqsim.protocol.Queue.sweep_single_phase): rate-limited by `stalled-check`;
-- every active job whose lock is gone goes back to `wait` at once (or to `failed` past max_stalled).
-- KEYS[1] stalled-check, KEYS[2] active, KEYS[3] wait, KEYS[4] failed
-- ARGV[1] key prefix "emq:{queue}:", ARGV[2] now (ms), ARGV[3] interval in ms, ARGV[4] max stalled
-- count ("" = no limit)
-- Returns {skipped (1/0), reclaimed ids, failed ids, {}}.
if redis.call("EXISTS", KEYS[1]) == 1 then
  return {1, {}, {}, {}}
end
redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
local max_stalled = tonumber(ARGV[4])
local reclaimed, failed = {}, {}
for _, id in ipairs(redis.call("LRANGE", KEYS[2], 0, -1)) do
  if redis.call("EXISTS", ARGV[1] .. id .. ":lock") == 0 and redis.call("LREM", KEYS[2], 1, id) > 0 then
    local count = redis.call("HINCRBY", ARGV[1] .. id, "stc", 1)
    if max_stalled ~= nil and count > max_stalled then
      redis.call("SADD", KEYS[4], id)
      failed[#failed + 1] = id
    else
      redis.call("RPUSH", KEYS[3], id)
      reclaimed[#reclaimed + 1] = id
    end
  end
end
return {0, reclaimed, failed, {}}
