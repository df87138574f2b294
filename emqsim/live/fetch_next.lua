-- fetchNext, shared by finish.lua and fail.lua (BullMQ's moveToFinished-14.lua moveJobFromWaitToActive):
-- an accepted finish takes the next waiting job for the same slot, as take.lua does. Not a script of its
-- own: `emqsim.live.lua.script_source` puts this text where a script says `--- @include "fetch_next"`.
-- KEYS[1] active, KEYS[4] wait; ARGV[1] key prefix, ARGV[6] the next take's token, ARGV[7] now (ms),
-- ARGV[8] lock duration in ms ("" = a lock without expiry), ARGV[9] "1" to set the lock.
-- Returns the fetched job id, or "" when nothing waits.
local function fetch_next()
  local taken = redis.call("LMOVE", KEYS[4], KEYS[1], "RIGHT", "LEFT")
  if not taken then
    return ""
  end
  if ARGV[9] == "1" then
    local lock = ARGV[1] .. taken .. ":lock"
    if ARGV[8] == "" then
      redis.call("SET", lock, ARGV[6])
    else
      redis.call("SET", lock, ARGV[6], "PX", ARGV[8])
    end
  end
  redis.call("HINCRBY", ARGV[1] .. taken, "ats", 1)
  redis.call("HSET", ARGV[1] .. taken, "processedOn", ARGV[7])
  return taken
end
