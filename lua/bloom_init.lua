#!lua
-- flagged: when Redis is out of memory it refuses the whole call up front,
-- never half of it.
-- bloom_init: create the first Bloom filter of a frontier unless it exists.
-- KEYS[1]  base key of the frontier
-- ARGV[1]  capacity (URLs)
-- ARGV[2]  error rate of the first filter
-- Returns 1 if created, 0 if it existed
local base = KEYS[1]
if redis.call('HEXISTS', base .. ':bloom', 'count') == 1 then return 0 end
bloom_new_filter(base, 0, tonumber(ARGV[1]), tonumber(ARGV[2]))
return 1
