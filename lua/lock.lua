#!lua
-- flagged: when Redis is out of memory it refuses the whole call up front,
-- never half of it.
-- lock: take a domain's lock (SET NX PX) and count locks that expired unreleased.
-- KEYS[1]  base key of the frontier
-- ARGV[1]  domain
-- ARGV[2]  owner token
-- ARGV[3]  ttl, ms
-- base:locks is a zset domain -> expiry ms of every lock taken and not yet
-- released; an entry past its expiry is a stale lock (its owner died).
-- Returns {1 if taken else 0, stale locks found}
local base = KEYS[1]
local now = now_ms()
local held = base .. ':locks'
local stale = redis.call('ZRANGEBYSCORE', held, '-inf', now)
for _, domain in ipairs(stale) do redis.call('ZREM', held, domain) end
if #stale > 0 then redis.call('HINCRBY', base .. ':stats', 'stale_locks', #stale) end
local ttl = tonumber(ARGV[3])
if redis.call('SET', base .. ':lock:' .. ARGV[1], ARGV[2], 'NX', 'PX', ttl) then
  redis.call('ZADD', held, now + ttl, ARGV[1])
  return {1, #stale}
end
return {0, #stale}
