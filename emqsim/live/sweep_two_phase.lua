-- moveStalledJobsToWait (emqsim.protocol.Queue.sweep_two_phase): rate-limited by `stalled-check`; move
-- the marked jobs whose lock is gone back to `wait` (or to `failed` past max_stalled), then mark every
-- active job.
-- KEYS[1] stalled-check, KEYS[2] stalled, KEYS[3] active, KEYS[4] wait, KEYS[5] failed
-- ARGV[1] key prefix "emq:{queue}:", ARGV[2] now (ms), ARGV[3] interval in ms, ARGV[4] max stalled
-- count ("" = no limit), ARGV[5] "1" for lazy failure (BullMQ 6: a job past the limit gets `defa` and still goes
-- back to `wait`; its next taker fails it)
-- Returns {skipped (1/0), reclaimed ids, failed ids, marked ids}.
if redis.call("EXISTS", KEYS[1]) == 1 then
  return {1, {}, {}, {}}
end
redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
local max_stalled = tonumber(ARGV[4])
local reclaimed, failed = {}, {}
local function requeue(id)
  local count = redis.call("HINCRBY", ARGV[1] .. id, "stc", 1)
  if max_stalled ~= nil and count > max_stalled and ARGV[5] == "1" then
    redis.call("HSET", ARGV[1] .. id, "defa", "job stalled more than allowable limit")
    redis.call("RPUSH", KEYS[4], id)
    reclaimed[#reclaimed + 1] = id
  elseif max_stalled ~= nil and count > max_stalled then
    redis.call("SADD", KEYS[5], id)
    failed[#failed + 1] = id
  else
    redis.call("RPUSH", KEYS[4], id)
    reclaimed[#reclaimed + 1] = id
  end
end
local stalling = redis.call("SMEMBERS", KEYS[2])
if #stalling > 0 then
  redis.call("DEL", KEYS[2])
  for _, id in ipairs(stalling) do
    if redis.call("EXISTS", ARGV[1] .. id .. ":lock") == 0 and redis.call("LREM", KEYS[3], 1, id) > 0 then
      requeue(id)
    end
  end
end
local active = redis.call("LRANGE", KEYS[3], 0, -1)
-- SADD in chunks: unpack() of a very long list would overflow Lua's C stack.
for i = 1, #active, 5000 do
  redis.call("SADD", KEYS[2], unpack(active, i, math.min(i + 4999, #active)))
end
return {0, reclaimed, failed, active}
