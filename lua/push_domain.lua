#!lua
-- flagged: when Redis is out of memory it refuses the whole call up front,
-- never half of it.
-- push_domain: a domain may not be fetched before now + ms (backoff, 429/503).
-- KEYS[1]  base key of the frontier
-- ARGV[1]  domain
-- ARGV[2]  ms from now
-- Returns the domain's next fetch time, ms
local base = KEYS[1]
local dkey = base .. ':dom:' .. ARGV[1]
local until_ms = now_ms() + tonumber(ARGV[2])
local nxt = math.max(until_ms, tonumber(redis.call('HGET', dkey, 'next') or '0') or 0)
redis.call('HSET', dkey, 'next', nxt)
redis.call('ZADD', base .. ':ready', 'XX', 'GT', nxt, ARGV[1])
redis.call('HINCRBY', base .. ':stats', 'domain_pushbacks', 1)
return nxt
