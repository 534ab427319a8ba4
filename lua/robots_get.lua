#!lua flags=no-writes,allow-oom
-- no-writes, allow-oom: it only reads.
-- robots_get: an origin's stored robots.txt record, its remaining life and
-- the server's clock, in one call (a pipeline may not send TIME to a Redis
-- Cluster: it has no key to route by).
-- KEYS[1]  base key of the frontier
-- ARGV[1]  origin ("<scheme>://<host>[:<port>]")
-- Returns {record or false, its remaining life in ms (PTTL), now in ms}
local key = KEYS[1] .. ':robots:' .. ARGV[1]
return {redis.call('GET', key), redis.call('PTTL', key), now_ms()}
