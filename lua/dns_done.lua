#!lua
-- flagged: when Redis is out of memory it refuses the whole call up front,
-- never half of it.
-- dns_done: the answers to the lookups dequeue.lua claimed (per-address
-- politeness, docs/politeness.md). Each host's record (base:dns:<host>)
-- takes its answer; the domains waiting on the name go back to base:ready.
-- Addresses count the registered domains they serve: one over
-- ip_shared_min, or an address in CRAWLER_IP_SHARED, makes a shared front end.
-- KEYS[1]  base key of the frontier
-- KEYS[2]  its address space (optional; see _lib.lua's IPB)
-- ARGV[1]  number of answers, then 5 values each:
--          host, registered domain, status, those of its addresses inside
--          CRAWLER_IP_SHARED (space-separated), its addresses (space-separated,
--          permitted ones only; "ok" only)
--          status: ok (addresses found), nx (the name does not exist),
--          retry (the lookup failed or timed out: try again later), refused
--          (every address is one the crawler may not go to)
-- Returns {address, reason, domains, ...}: the addresses this call made shared front ends
local base = KEYS[1]
local now = now_ms()
local c = defaults(base)
local count = tonumber(ARGV[1])
local flips = {}
local ipstats = IPB .. ':stats'

local function make_shared(a, reason, domains)
  redis.call('HSET', IPB .. ':ip:' .. a, 'shared', 1)
  redis.call('HSET', IPB .. ':ipshared', a, cjson.encode({reason = reason, domains = domains, since = now}))
  flips[#flips + 1] = a
  flips[#flips + 1] = reason
  flips[#flips + 1] = domains
end

-- <domain> is served by <a> (or no longer, <add> false)
local function note(a, domain, add, in_range)
  local k = IPB .. ':ip:' .. a
  local shared = redis.call('HGET', k, 'shared') == '1'
  local set = IPB .. ':ipdoms:' .. a
  if add then
    if shared then
      redis.call('HINCRBY', k, 'doms', 1)
    else
      redis.call('SADD', set, domain)
      redis.call('HSET', k, 'doms', redis.call('SCARD', set))
    end
  elseif not shared then
    redis.call('SREM', set, domain)
    redis.call('HSET', k, 'doms', redis.call('SCARD', set))
  end
  local doms = tonumber(redis.call('HGET', k, 'doms') or '0') or 0
  redis.call('ZADD', IPB .. ':ipbusy', doms, a)
  if not shared and add then
    if in_range then
      make_shared(a, 'range', doms)
      redis.call('DEL', set)
    elseif c.shared_min > 0 and doms > c.shared_min then
      make_shared(a, 'domains', doms)
      redis.call('DEL', set)  -- counted on from here, never down: a front end stays one
    end
  end
end

for i = 0, count - 1 do
  local at = 2 + i * 5
  local host, domain, status, list = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 4]
  local in_range = {}
  for a in string.gmatch(ARGV[at + 3], '%S+') do in_range[a] = true end
  local dk = base .. ':dns:' .. host
  local old = redis.call('HMGET', dk, 'st', 'a')
  if status == 'ok' then
    local known, fresh = {}, {}
    for a in string.gmatch(old[2] or '', '%S+') do known[a] = true end
    for a in string.gmatch(list, '%S+') do
      fresh[a] = true
      if not known[a] then note(a, domain, true, in_range[a]) end
    end
    local moved = false
    for a in pairs(known) do
      if not fresh[a] then note(a, domain, false, false); moved = true end
    end
    if moved then redis.call('HINCRBY', ipstats, 'ip_moves', 1) end
    redis.call('HSET', dk, 'st', 'ok', 'a', list, 'exp', now + c.ttl, 'tries', 0, 'fails', 0)
    redis.call('HINCRBY', ipstats, 'dns_ok', 1)
  elseif status == 'nx' then
    local tries = redis.call('HINCRBY', dk, 'tries', 1)
    if tries > c.nx then
      redis.call('HSET', dk, 'st', 'nx', 'exp', now + c.ttl)
      redis.call('HINCRBY', ipstats, 'dns_nx', 1)
    else
      redis.call('HSET', dk, 'st', 'retry', 'until', now + 1000 * 4 ^ (tries - 1))
      redis.call('HINCRBY', ipstats, 'dns_retry', 1)
    end
  elseif status == 'refused' then
    -- sticky: a name that led inside once is not trusted again this crawl
    redis.call('HSET', dk, 'st', 'refused', 'exp', now + 365 * 86400000)
    redis.call('HINCRBY', ipstats, 'dns_refused', 1)
  else  -- a failed lookup: known addresses serve a while longer, else the domain waits
    redis.call('HINCRBY', ipstats, 'dns_failed', 1)
    if old[1] == 'ok' then
      redis.call('HSET', dk, 'exp', now + math.min(c.ttl, 60000))
    else
      local tries = redis.call('HINCRBY', dk, 'fails', 1)
      redis.call('HSET', dk, 'st', 'retry', 'until', now + math.min(60000, 1000 * 2 ^ (tries - 1)))
    end
  end
  redis.call('HDEL', dk, 'cl')
  name_done(base, host, now)
end
return flips
