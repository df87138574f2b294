-- moveToFinished(failed) by the job's holder (emqsim.protocol.Queue.fail): token-checked like a completion
-- (-2 "Missing lock", -6 "Lock mismatch", -3 "not in the active state"); with the job option `attempts` not
-- used up the job is retried instead (retryJob-11.lua: out of `active`, LPUSH to the back of `wait`,
-- `atm` + 1; BullMQ decides `attemptsMade + 1 < attempts` from the same counter).
-- KEYS[1] active, KEYS[2] stalled, KEYS[3] failed, KEYS[4] wait
-- ARGV[1] key prefix "emq:{queue}:", ARGV[2] job id, ARGV[3] token, ARGV[4] "1" to check the token,
-- ARGV[5] attempts; fetchNext as in finish.lua: ARGV[6] the next take's token ("" = no fetch), ARGV[7] now
-- (ms), ARGV[8] lock duration in ms ("" = no expiry), ARGV[9] "1" to set the lock (a retry fetches none).
-- Returns {code, was_active (1/0), retried (1/0), the fetched job id or ""}.
local id = ARGV[2]
local check = ARGV[4] == "1"
local attempts = tonumber(ARGV[5])
--- @include "fetch_next"
local function done(code, active, retried)
  local next_id = ""
  if code == 0 and retried == 0 and ARGV[6] ~= nil and ARGV[6] ~= "" then
    next_id = fetch_next()
  end
  return {code, active, retried, next_id}
end
if check then
  local lock = ARGV[1] .. id .. ":lock"
  local current = redis.call("GET", lock)
  if not current then
    return done(-2, 0, 0)
  end
  if current ~= ARGV[3] then
    return done(-6, 0, 0)
  end
  redis.call("DEL", lock)
  redis.call("SREM", KEYS[2], id)
end
if redis.call("LREM", KEYS[1], -1, id) == 0 then
  if check then
    return done(-3, 0, 0)
  end
  return done(0, 0, 0) -- reclaimed meanwhile: left alone
end
if attempts > 1 then
  local made = tonumber(redis.call("HGET", ARGV[1] .. id, "atm") or "0")
  redis.call("HINCRBY", ARGV[1] .. id, "atm", 1)
  if made + 1 < attempts then
    redis.call("LPUSH", KEYS[4], id)
    return done(0, 1, 1)
  end
end
redis.call("SADD", KEYS[3], id)
return done(0, 1, 0)
