#!lua
-- flagged: when Redis is out of memory it refuses the whole call up front,
-- never half of it.
-- delay: park requests in the delayed set until a not-before time on the
-- server's clock; dequeue releases them into their queues when due.
-- KEYS[1]  base key of the frontier
-- KEYS[2]  its address space (optional: see _lib.lua's IPB; acknowledgements free addresses)
-- ARGV[1]  number of lease ids to acknowledge, then the ids
-- then     number of history writes, then 11 values each (_recrawl.lua
--          read_writes), applied before the acknowledgements
-- then per request, 5 values: delay ms, domain, priority, entry, and the
--   lease it retries ('' for none: a request that was never leased)
-- Returns the number of requests delayed. A retry whose lease is no longer
-- held (it expired and went back to its queue, perhaps fetched and stored
-- by another worker since: its worker was frozen or cut off past it) is
-- void, as its acknowledgement is: parked, it would be a second copy of its
-- URL. Counted as 'delay_void'.
local base = KEYS[1]
local acks, i = read_list(1)
local writes
writes, i = recrawl.read_writes(i)
local now = now_ms()
local n, void = 0, 0
while i + 4 <= #ARGV do
  local lease = ARGV[i + 4]
  if lease == '' or redis.call('ZSCORE', base .. ':leases', lease) then
    local id = redis.call('INCR', base .. ':seq')
    local member = id .. '\n' .. ARGV[i + 1] .. '\n' .. ARGV[i + 2] .. '\n' .. ARGV[i + 3]
    redis.call('ZADD', base .. ':delayed', now + tonumber(ARGV[i]), member)
    n = n + 1
  else
    void = void + 1
  end
  i = i + 5
end
-- acknowledged after the requests are safe in the delayed set, the history
-- written before
recrawl.history_write(base, writes, now)
ack_all(base, acks, now)
if n > 0 then redis.call('HINCRBY', base .. ':stats', 'delayed', n) end
if void > 0 then redis.call('HINCRBY', base .. ':stats', 'delay_void', void) end
return n
