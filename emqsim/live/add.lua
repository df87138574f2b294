-- add: a new job's hash and its id on the left of `wait` (emqsim.protocol.Queue.add).
-- KEYS[1] wait
-- ARGV[1] key prefix "emq:{queue}:", ARGV[2] job id
redis.call("HSET", ARGV[1] .. ARGV[2], "ats", 0, "stc", 0)
redis.call("LPUSH", KEYS[1], ARGV[2])
return 1
