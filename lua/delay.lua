#!lua
-- flagged: when Redis is out of memory it refuses the whole call up front,
-- never half of it.
-- delay: park requests in the delayed set until a not-before time on the
-- server's clock; dequeue releases them into their queues when due.
-- KEYS[1]  base key of the frontier
-- KEYS[2]  its address space (optional: see _lib.lua's IPB; acknowledgements free addresses)
-- ARGV[1]  number of lease ids to acknowledge, then the ids
-- then per request, 4 values: delay ms, domain, priority, entry
-- Returns the number of requests delayed
local base = KEYS[1]
local acks, i = read_list(1)
local now = now_ms()
local n = 0
while i + 3 <= #ARGV do
  local id = redis.call('INCR', base .. ':seq')
  local member = id .. '\n' .. ARGV[i + 1] .. '\n' .. ARGV[i + 2] .. '\n' .. ARGV[i + 3]
  redis.call('ZADD', base .. ':delayed', now + tonumber(ARGV[i]), member)
  n = n + 1
  i = i + 4
end
-- acknowledged after the requests are safe in the delayed set
ack_all(base, acks)
if n > 0 then redis.call('HINCRBY', base .. ':stats', 'delayed', n) end
return n
