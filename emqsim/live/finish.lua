-- moveToFinished (emqsim.protocol.Queue.finish): with the token check, a missing or foreign lock rejects
-- the completion (-2 "Missing lock", -6 "Lock mismatch", -3 "not in the active state").
-- KEYS[1] active, KEYS[2] stalled, KEYS[3] completed, KEYS[4] wait (only with fetchNext)
-- ARGV[1] key prefix "emq:{queue}:", ARGV[2] job id, ARGV[3] token, ARGV[4] "1" to check the token,
-- ARGV[5] "1" to remove a completed job (its hash deleted, its id not added to completed)
-- fetchNext (emqsim.server.Server.finish_and_fetch; BullMQ's moveToFinished with fetchNext,
-- moveToFinished-14.lua's moveJobFromWaitToActive): ARGV[6] the next take's token ("" or absent: no fetch),
-- ARGV[7] now (ms), ARGV[8] lock duration in ms ("" = a lock without expiry), ARGV[9] "1" to set the lock.
-- An accepted finish (code 0) then takes the next waiting job for the same slot, as take.lua does.
-- Returns {code, was_active (1/0)}, with fetchNext {code, was_active, the fetched job id or ""}.
local id = ARGV[2]
local check = ARGV[4] == "1"
local fetch = ARGV[6] ~= nil and ARGV[6] ~= ""
--- @include "fetch_next"
local function done(code, active)
  if not fetch then
    return {code, active}
  end
  local next_id = ""
  if code == 0 then
    next_id = fetch_next()
  end
  return {code, active, next_id}
end
if check then
  local lock = ARGV[1] .. id .. ":lock"
  local current = redis.call("GET", lock)
  if not current then
    return done(-2, 0)
  end
  if current ~= ARGV[3] then
    return done(-6, 0)
  end
  redis.call("DEL", lock)
  redis.call("SREM", KEYS[2], id)
end
local removed = redis.call("LREM", KEYS[1], -1, id)
if removed == 0 then
  if check then
    return done(-3, 0)
  end
  -- Unchecked: the ack is accepted, but the job is no longer active, so nothing else changes.
  return done(0, 0)
end
if ARGV[5] == "1" then
  redis.call("DEL", ARGV[1] .. id)
else
  redis.call("SADD", KEYS[3], id)
end
return done(0, 1)
