#!lua flags=allow-oom
-- allow-oom: it frees at least what it stores, so it keeps the crawl going when
-- Redis is out of memory (maxmemory with noeviction).
-- release: give leased requests back to the front of their queues now
-- (a worker closing cleanly hands back what it had not crawled). A revisit
-- goes back as its "V" entry, counted queued: it keeps its admission
-- (_lib.lua's requeue_lease; design/recrawl.md E).
-- KEYS[1]  base key of the frontier
-- KEYS[2]  its address space (optional: see _lib.lua's IPB)
-- ARGV     lease ids (a parked domain's delay runs from now)
-- Returns the number of requests given back
local base = KEYS[1]
local now = now_ms()
local n = 0
for a = #ARGV, 1, -1 do  -- backwards: pushed to the front, they keep their order
  if requeue_lease(base, ARGV[a], now, false) then n = n + 1 end
end
if n > 0 then redis.call('HINCRBY', base .. ':stats', 'released', n) end
return n
