#!lua flags=allow-oom
-- allow-oom: releasing a lock only frees memory.
-- unlock: release a domain's lock, only by its owner (compare and delete).
-- KEYS[1]  base key of the frontier
-- ARGV[1]  domain
-- ARGV[2]  owner token
-- Returns 1 if released, 0 if the lock was not this owner's (expired or taken over)
local base = KEYS[1]
local key = base .. ':lock:' .. ARGV[1]
if redis.call('GET', key) == ARGV[2] then
  redis.call('DEL', key)
  redis.call('ZREM', base .. ':locks', ARGV[1])
  return 1
end
return 0
