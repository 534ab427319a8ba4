#!lua flags=allow-oom
-- allow-oom: it frees what it touches, so a full Redis can still be cleared.
-- clear: what a frontier holds in the address space its spider's shards
-- share (a standalone Redis) is given back before its own keys are deleted
-- (Frontier.clear()): the address charged with each of its leases is freed
-- as if the lease were given up now (its first waiter is offered it then),
-- and its domains waiting on an address leave that address's queue. The
-- other shards' domains keep their places and their turns.
-- KEYS[1]  base key of the frontier
-- KEYS[2]  its address space (see _lib.lua's IPB)
-- ARGV     addresses whose queue of waiting domains may hold this frontier's
-- Returns {addresses freed, waiting domains removed}
local base = KEYS[1]
local now = now_ms()
local freed = 0
for _, id in ipairs(redis.call('HKEYS', base .. ':leasea')) do
  ip_release(base, id, now)
  freed = freed + 1
end
local mine = base .. '\n'
local removed = 0
for _, a in ipairs(ARGV) do
  local wait = IPB .. ':ipwait:' .. a
  for _, member in ipairs(redis.call('ZRANGE', wait, 0, -1)) do
    if string.sub(member, 1, #mine) == mine then
      redis.call('ZREM', wait, member)
      removed = removed + 1
    end
  end
end
if removed > 0 then redis.call('HINCRBY', IPB .. ':stats', 'ip_waiting', -removed) end
return {freed, removed}
