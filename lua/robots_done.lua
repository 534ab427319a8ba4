#!lua flags=allow-oom
-- allow-oom: ending a claim only frees memory.
-- robots_done: end this worker's claim on fetching an origin's robots.txt
-- (compare and delete, so a claim that expired and was taken by another
-- worker is left to it).
-- KEYS[1]  base key of the frontier
-- ARGV[1]  origin ("<scheme>://<host>[:<port>]")
-- ARGV[2]  the claim's token
-- Returns 1 if the claim was this worker's and is gone, else 0
local key = KEYS[1] .. ':robots:' .. ARGV[1] .. ':fetching'
if redis.call('GET', key) == ARGV[2] then
  redis.call('DEL', key)
  return 1
end
return 0
