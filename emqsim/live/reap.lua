-- The timeout reaper (emqsim.protocol.Queue.reap): any active job whose age now - processedOn is strictly
-- over the timeout goes back to `wait` (or to `failed` past max_stalled); its fencing lock, if any, is
-- deleted so the old holder's finish is rejected.
-- KEYS[1] active, KEYS[2] wait, KEYS[3] failed
-- ARGV[1] key prefix "emq:{queue}:", ARGV[2] now (ms), ARGV[3] timeout in ms, ARGV[4] max stalled count
-- ("" = no limit)
-- Returns {0, reclaimed ids, failed ids, {}}.
local now = tonumber(ARGV[2])
local timeout = tonumber(ARGV[3])
local max_stalled = tonumber(ARGV[4])
local reclaimed, failed = {}, {}
for _, id in ipairs(redis.call("LRANGE", KEYS[1], 0, -1)) do
  local started = redis.call("HGET", ARGV[1] .. id, "processedOn")
  if started and now - tonumber(started) > timeout and redis.call("LREM", KEYS[1], 1, id) > 0 then
    redis.call("DEL", ARGV[1] .. id .. ":lock")
    local count = redis.call("HINCRBY", ARGV[1] .. id, "stc", 1)
    if max_stalled ~= nil and count > max_stalled then
      redis.call("SADD", KEYS[3], id)
      failed[#failed + 1] = id
    else
      redis.call("RPUSH", KEYS[2], id)
      reclaimed[#reclaimed + 1] = id
    end
  end
end
return {0, reclaimed, failed, {}}
