#!lua flags=allow-oom
-- allow-oom: it frees at least what it stores, so it keeps the crawl going when
-- Redis is out of memory (maxmemory with noeviction).
-- dequeue: lease up to N requests of due domains, within each domain's token
-- bucket and minimum delay, on the server's clock. Also acknowledges leases,
-- returns expired leases to their queues and releases due delayed requests.
-- KEYS[1]  base key of the frontier
-- KEYS[2]  its address space (optional; see _lib.lua's IPB)
-- ARGV[1]  maximum number of requests
-- ARGV[2]  lease duration, ms
-- ARGV[3]  default rate, requests per second (0: no token bucket)
-- ARGV[4]  default burst
-- ARGV[5]  default minimum delay between two requests to a domain, ms
-- ARGV[6]  call id ("" for none): a call sent again with the same id (its
--          reply was lost, the client retried) gets the first call's reply,
--          so no lease is taken twice and none is left without its worker
-- ARGV[7]  the id of this client's previous call, whose reply arrived: its
--          kept reply is deleted ("" for none), so a worker keeps one at most
-- ARGV[8]  number of lease ids to acknowledge, then the ids
-- then     the epoch id the caller opened the frontier under ("" for no
--          check) and the highest lease id counter (base:seq) it has seen:
--          when the epoch record is gone or holds another id, or the counter
--          is lower (the frontier went back in time), nothing is done, not
--          even the acknowledgements (see epoch.lua)
-- then     "1": a Redis Cluster's frontier, fenced after a failover (_lib.lua's
--          fence(), before the epoch check: a promoted replica's few missing
--          writes are not a lost frontier); "" or absent: no fence
-- After a fence, no domain is served before one full delay from it (its own:
-- fence_hold() below) and no address before its delay from it; a token
-- bucket starts empty at it.
-- Overrides per domain: JSON {"rate": r, "burst": b, "delay": seconds} in
-- base:policy (operators, live) else base:policy:settings; a robots.txt
-- Crawl-delay in base:policy:robots (seconds) raises the delay.
-- A domain with a delay gives one request at a time and is parked (out of
-- base:ready, dom 'busy' = the lease) until that request is acknowledged:
-- the delay runs from the request's mark, not from this dequeue.
-- Per address (meta ip_delay > 0, docs/politeness.md): a request is handed
-- out only when its domain is due and an address of its host is free and
-- due; the address is charged (base:leasea) and named in the reply. A host
-- with no known addresses is claimed for a lookup (listed in the reply; the
-- worker answers with dns_done.lua) and its domain waits off base:ready; a
-- domain whose host's addresses are all busy waits in that address's
-- ipwait, offered the address when it frees. A host known not to exist, or
-- to lead only to refused addresses, gets its requests handed out at once
-- with the address "!nx" or "!refused": they end as dead letters unsent.
-- Returns {now_ms, next_due_ms or -1 (the earliest score of base:ready,
--          base:delayed and, per address, of ipdue and dnsq), epoch id ("" if
--          none), seq, queued, {host, domain, ...: names to look up},
--          the frontier's latest fence ms (0: never fenced),
--          lease id, record, address, lease id, record, address, ...}
local base = KEYS[1]
local want = tonumber(ARGV[1])
local lease_ms = tonumber(ARGV[2])
local d_rate, d_burst, d_delay = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local call = ARGV[6]
if ARGV[7] ~= '' then redis.call('DEL', base .. ':call:' .. ARGV[7]) end
local acks, at = read_list(8)
local stats = base .. ':stats'
-- one reading of the clock for the acks and the take, so the take sees the
-- marks as the acks placed them (1 ms late), however long this call runs
local now = now_ms()
-- a failover fence first (its counter jump keeps the epoch check below quiet)
local fenced = 0
if ARGV[at + 2] == '1' then fenced = fence(base, now) end
-- the reply's epoch fields: the epoch id (read once: a script is atomic),
-- the lease id counter and the requests queued, as this call leaves them,
-- and the latest fence
local epoch_id = nil
local function epoch(out)
  epoch_id = epoch_id or redis.call('HGET', base .. ':epoch', 'id') or ''
  out[3] = epoch_id
  out[4] = tonumber(redis.call('GET', base .. ':seq') or '0')
  out[5] = tonumber(redis.call('HGET', stats, 'queued') or '0') or 0
  out[7] = fenced
  return out
end
local expect = ARGV[at] or ''
if expect ~= '' then
  epoch_id = redis.call('HGET', base .. ':epoch', 'id') or ''
  local seq = tonumber(redis.call('GET', base .. ':seq') or '0')
  if epoch_id ~= expect or seq < (tonumber(ARGV[at + 1]) or 0) then return epoch({now, -1, '', 0, 0, {}, 0}) end
end
ack_all(base, acks, now)
local replay_key = base .. ':call:' .. call
if call ~= '' then
  local done = redis.call('GET', replay_key)
  if done then return epoch(cmsgpack.unpack(done)) end
end
local ready = base .. ':ready'

local expired = redis.call('ZRANGEBYSCORE', base .. ':leases', '-inf', now, 'LIMIT', 0, 200)
for e = #expired, 1, -1 do  -- backwards: pushed to the front, they keep their order
  local id = expired[e]
  local rec = redis.call('HGET', base .. ':lease', id)
  redis.call('ZREM', base .. ':leases', id)
  redis.call('HDEL', base .. ':lease', id)
  if rec then
    unpark(base, split_record(rec), id, now, nil)  -- its worker is gone: the delay runs from now
    push_record(base, rec, true, now)
  end
  ip_release(base, id, now)
end
if #expired > 0 then redis.call('HINCRBY', stats, 'leases_expired', #expired) end

local due = redis.call('ZRANGEBYSCORE', base .. ':delayed', '-inf', now, 'LIMIT', 0, 500)
for _, member in ipairs(due) do
  redis.call('ZREM', base .. ':delayed', member)
  local cut = string.find(member, '\n', 1, true)
  push_record(base, string.sub(member, cut + 1), false, now)
end
if #due > 0 then redis.call('HINCRBY', stats, 'delayed_released', #due) end

local function pop(domain)
  local qp = base .. ':qp:' .. domain
  while true do
    local top = redis.call('ZRANGE', qp, 0, 0)
    if #top == 0 then return nil end
    local q = base .. ':q:' .. domain .. ':' .. top[1]
    local entry = redis.call('LPOP', q)
    if redis.call('EXISTS', q) == 0 then redis.call('ZREM', qp, top[1]) end
    if entry then return top[1], entry end
  end
end

-- the request at the head of a domain's queue, left there
local function peek(domain)
  local qp = base .. ':qp:' .. domain
  while true do
    local top = redis.call('ZRANGE', qp, 0, 0)
    if #top == 0 then return nil end
    local entry = redis.call('LINDEX', base .. ':q:' .. domain .. ':' .. top[1], 0)
    if entry then return top[1], entry end
    redis.call('ZREM', qp, top[1])
  end
end

local resolve = {}
local out = {now, -1, '', 0, 0, resolve, fenced}
local taken, attempts, denials = 0, 0, 0
local ipc = defaults(base)
local gated = ipc.ip_delay > 0
local OFFER_MS = 1000  -- an address offered to a waiter that did not take it is offered again after this

-- after a failover fence: how long a domain of <delay> ms (its own, robots.txt
-- included) is held from the fence, the longest its delay can be (stretched
-- by delay_factor up to delay_max); an address, its own delay
local function fence_hold(delay)
  if ipc.factor > 0 and ipc.max > delay then return ipc.max end
  return delay
end
local function ip_fenced(nxt, shared)
  if fenced == 0 then return nxt end
  return math.max(nxt, fenced + (shared and ipc.shared_delay or ipc.ip_delay))
end

-- per address: hand each address that is free and due to its first waiter
-- whose own turn has come (one a turn; a shared front end, one a start)
if gated then
  local dueips = redis.call('ZRANGEBYSCORE', IPB .. ':ipdue', '-inf', now, 'LIMIT', 0, 64)
  for _, a in ipairs(dueips) do
    local k = IPB .. ':ip:' .. a
    local v = redis.call('HMGET', k, 'out', 'next', 'shared')
    local shared = v[3] == '1'
    local cap = shared and ipc.shared_cap or 1
    local busy, nxt = tonumber(v[1] or '0') or 0, ip_fenced(tonumber(v[2] or '0') or 0, shared)
    local wait = IPB .. ':ipwait:' .. a
    local head = redis.call('ZRANGE', wait, 0, 0, 'WITHSCORES')
    if busy >= cap or #head == 0 then
      redis.call('ZREM', IPB .. ':ipdue', a)  -- an acknowledgement offers it again
    elseif nxt > now or tonumber(head[2]) > now then
      redis.call('ZADD', IPB .. ':ipdue', math.max(nxt, tonumber(head[2])), a)
    else
      -- the first waiter that can go takes the offer (one whose queue emptied is passed over)
      while #head > 0 and tonumber(head[2]) <= now do
        redis.call('ZREM', wait, head[1])
        redis.call('HINCRBY', IPB .. ':stats', 'ip_waiting', -1)
        local cut = string.find(head[1], '\n', 1, true)
        if ready_again(string.sub(head[1], 1, cut - 1), string.sub(head[1], cut + 1), now) then
          redis.call('HSET', k, 'offer', head[1])
          break
        end
        head = redis.call('ZRANGE', wait, 0, 0, 'WITHSCORES')
      end
      if redis.call('EXISTS', wait) == 1 then
        redis.call('ZADD', IPB .. ':ipdue', now + (shared and math.max(ipc.shared_delay, 1) or OFFER_MS), a)
      else
        redis.call('ZREM', IPB .. ':ipdue', a)
      end
    end
  end
  -- lookups claimed and never answered (their worker died): their domains come back, to claim them again
  local stale = redis.call('ZRANGEBYSCORE', base .. ':dnsq', '-inf', now, 'LIMIT', 0, 100)
  for _, host in ipairs(stale) do name_done(base, host, now) end
end

-- the host of a queued request: "U<depth> <url>", or "R" + msgpack of
-- Request.to_dict(), whose first key is its url (read here without
-- unpacking the rest); nil when unreadable
local function host_of(entry)
  local url
  if string.sub(entry, 1, 1) == 'U' then
    url = string.sub(entry, (string.find(entry, ' ', 1, true) or #entry) + 1)
  else
    local at = string.find(entry, '\163url', 1, true)
    if not at then return nil end
    local i = at + 4
    local b = string.byte(entry, i)
    if not b then return nil end
    local len
    if b >= 0xa0 and b <= 0xbf then len = b - 0xa0; i = i + 1
    elseif b == 0xd9 then len = string.byte(entry, i + 1); i = i + 2
    elseif b == 0xda then len = string.byte(entry, i + 1) * 256 + string.byte(entry, i + 2); i = i + 3
    else return nil end
    url = string.sub(entry, i, i + len - 1)
  end
  local s = string.find(url, '//', 1, true)
  if not s then return nil end
  local hostport = string.match(string.sub(url, s + 2), '^[^/?#]*')
  hostport = string.match(hostport, '[^@]*$')
  local host = string.match(hostport, '^%[([^%]]*)%]') or string.match(hostport, '^[^:]*')
  if host == nil or host == '' then return nil end
  return string.lower(host)
end

local function claim(host, domain, dk)
  local deadline = now + ipc.claim
  redis.call('HSET', dk, 'cl', deadline)
  redis.call('ZADD', base .. ':dnsq', deadline, host)
  resolve[#resolve + 1] = host
  resolve[#resolve + 1] = domain
end

-- where the head request of <domain> may go now: an address of its host
-- free and due, with whether it is a shared front end; '' (its host is
-- unreadable: not charged), '!nx' or '!refused' (no address to go to); nil
-- when the domain waits (for its name's lookup, or for an address), moved
-- off base:ready here
local function gate(domain, entry)
  local host = host_of(entry)
  if host == nil then
    redis.call('HINCRBY', stats, 'ip_unreadable', 1)
    return ''
  end
  local addrs, rr, dk = nil, 0, nil
  if string.find(host, ':', 1, true) or string.match(host, '^[%d%.]+$') then
    addrs = {host}  -- an address in the URL is its own record
  else
    dk = base .. ':dns:' .. host
    local r = redis.call('HMGET', dk, 'st', 'a', 'exp', 'until', 'cl', 'rr')
    local st, exp = r[1], tonumber(r[3] or '0') or 0
    local free = (tonumber(r[5] or '0') or 0) <= now
    if st == 'nx' or st == 'refused' then
      if exp > now then return '!' .. st end
      st = nil  -- a missing name's record ran out: look again
    elseif st == 'retry' then
      local u = tonumber(r[4] or '0') or 0
      if u > now then
        redis.call('ZADD', ready, u, domain)  -- postponed, nothing lost
        return nil
      end
      st = nil
    elseif st == 'ok' and exp <= now then
      st = nil  -- its time is up: looked up again before the next request (a failed lookup keeps it a while)
    end
    if st ~= 'ok' then
      if free then claim(host, domain, dk) end
      redis.call('SADD', base .. ':dnswait:' .. host, domain)
      redis.call('ZREM', ready, domain)
      return nil
    end
    addrs, rr = {}, tonumber(r[6] or '0') or 0
    for a in string.gmatch(r[2], '%S+') do addrs[#addrs + 1] = a end
    if #addrs == 0 then return '!refused' end
  end
  local best, best_t = nil, nil
  local me = base .. '\n' .. domain
  for i = 0, #addrs - 1 do
    local a = addrs[(rr + i) % #addrs + 1]
    local k = IPB .. ':ip:' .. a
    local v = redis.call('HMGET', k, 'out', 'next', 'shared', 'offer')
    local shared = v[3] == '1'
    local busy, nxt = tonumber(v[1] or '0') or 0, ip_fenced(tonumber(v[2] or '0') or 0, shared)
    if busy < (shared and ipc.shared_cap or 1) then
      -- free and due: its waiters go first, in turn (the one offered it, or none waiting)
      local mine = v[4] == me
      if nxt <= now and (mine or redis.call('EXISTS', IPB .. ':ipwait:' .. a) == 0) then
        if mine then redis.call('HDEL', k, 'offer') end
        if dk and #addrs > 1 then redis.call('HSET', dk, 'rr', (rr + i + 1) % #addrs) end
        return a, shared
      end
      if best_t == nil or nxt < best_t then best, best_t = a, nxt end
    elseif best == nil then
      best = a
    end
  end
  -- every address busy or not due: the domain waits on the one that frees first
  local dnext = tonumber(redis.call('HGET', base .. ':dom:' .. domain, 'next') or '0') or 0
  redis.call('ZREM', ready, domain)
  -- NX: a domain already waiting keeps its place (new URLs put it back in ready meanwhile)
  if redis.call('ZADD', IPB .. ':ipwait:' .. best, 'NX', math.max(dnext, now), me) == 1 then
    redis.call('HINCRBY', IPB .. ':stats', 'ip_waiting', 1)
  end
  redis.call('HINCRBY', stats, 'ip_denials', 1)
  if best_t ~= nil then redis.call('ZADD', IPB .. ':ipdue', 'LT', best_t, best) end
  return nil
end

-- lease <id> is charged to address <a>
local function charge(id, a, shared)
  redis.call('HSET', base .. ':leasea', id, a)
  local k = IPB .. ':ip:' .. a
  redis.call('HINCRBY', k, 'out', 1)
  redis.call('HINCRBY', k, 'served', 1)
  if shared then redis.call('HSET', k, 'next', now + ipc.shared_delay) end
end

-- excluded while queued: its requests are dropped, never fetched
local function drop_excluded(domain, dkey)
  if redis.call('SISMEMBER', base .. ':excluded', domain) == 0 then return false end
  local dropped = tonumber(redis.call('HGET', dkey, 'n') or '0') or 0
  for _, prio in ipairs(redis.call('ZRANGE', base .. ':qp:' .. domain, 0, -1)) do
    redis.call('DEL', base .. ':q:' .. domain .. ':' .. prio)
  end
  redis.call('DEL', base .. ':qp:' .. domain)
  redis.call('HSET', dkey, 'n', 0)
  redis.call('ZREM', ready, domain)
  redis.call('HINCRBY', stats, 'queued', -dropped)
  redis.call('HINCRBY', stats, 'excluded_dropped', dropped)
  return true
end

local function serve(domain, dkey)
  local st = redis.call('HMGET', dkey, 'n', 'tokens', 'ts', 'busy')
  if st[4] then  -- parked: its request is out (never ready; kept out if put back by hand)
    redis.call('ZREM', ready, domain)
    return
  end
  local n = tonumber(st[1] or '0') or 0
  local rate, burst, delay = policy(base, domain, d_rate, d_burst, d_delay)
  local tokens = tonumber(st[2] or '') or burst
  if fenced > 0 then  -- after a failover: held one full delay from the fence
    local hold = fenced + fence_hold(delay)
    if now < hold then
      redis.call('ZADD', ready, hold, domain)
      return
    end
    if rate > 0 and (tonumber(st[3] or '') or 0) < fenced then st[3], tokens = tostring(fenced), 0 end
  end
  if rate > 0 then
    local ts = tonumber(st[3] or '') or now
    tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
  end
  local took, waits = 0, false
  while taken < want and n > 0 do
    if rate > 0 and tokens < 1 then break end
    local address, shared = '', false
    if gated then
      local head_prio, head = peek(domain)
      if head_prio == nil then n = 0; break end
      address, shared = gate(domain, head)
      if address == nil then waits = true; break end
    end
    local prio, entry = pop(domain)
    if prio == nil then n = 0; break end
    n = n - 1
    tokens = tokens - 1
    took = took + 1
    taken = taken + 1
    local id = tostring(redis.call('INCR', base .. ':seq'))
    local rec = domain .. '\n' .. prio .. '\n' .. entry
    redis.call('ZADD', base .. ':leases', now + lease_ms, id)
    redis.call('HSET', base .. ':lease', id, rec)
    out[#out + 1] = id
    out[#out + 1] = rec
    out[#out + 1] = address
    local sent = string.sub(address, 1, 1) ~= '!'  -- "!nx", "!refused": ends unsent
    if sent and address ~= '' then charge(id, address, shared) end
    if delay > 0 and sent then
      redis.call('HSET', dkey, 'busy', id)  -- parked until this lease is acknowledged
      break
    end
    if gated and sent then break end  -- one request a turn of its address
  end
  if took == 0 and n > 0 then denials = denials + 1 end
  if waits then  -- gate() moved the domain: off base:ready, or to a later score
    redis.call('HSET', dkey, 'n', n, 'tokens', tokens, 'ts', now)
    if took > 0 then redis.call('HINCRBY', stats, 'queued', -took) end
    return
  end
  local nxt = now
  if rate > 0 and tokens < 1 then nxt = math.max(nxt, now + math.ceil((1 - tokens) * 1000 / rate)) end
  if rate <= 0 then tokens = burst end
  redis.call('HSET', dkey, 'n', n, 'tokens', tokens, 'ts', now, 'next', nxt)
  if n > 0 and not (delay > 0 and took > 0) then
    redis.call('ZADD', ready, nxt, domain)
  else
    redis.call('ZREM', ready, domain)
  end
  if took > 0 then redis.call('HINCRBY', stats, 'queued', -took) end
end

local domains = redis.call('ZRANGEBYSCORE', ready, '-inf', now, 'LIMIT', 0, want)
for _, domain in ipairs(domains) do
  if taken >= want then break end
  attempts = attempts + 1
  local dkey = base .. ':dom:' .. domain
  if not drop_excluded(domain, dkey) then serve(domain, dkey) end
end
if taken > 0 then redis.call('HINCRBY', stats, 'dequeued', taken) end
if attempts > 0 then redis.call('HINCRBY', stats, 'attempts', attempts) end
if denials > 0 then redis.call('HINCRBY', stats, 'denials', denials) end
local head = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
if #head > 0 then out[2] = tonumber(head[2]) end
-- a delayed request joins its queue when its time comes: the caller polls then
local function sooner(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 and (out[2] < 0 or tonumber(first[2]) < out[2]) then out[2] = tonumber(first[2]) end
end
sooner(base .. ':delayed')
if gated then
  sooner(IPB .. ':ipdue')  -- an address frees: its waiter is offered it by the next call
  sooner(base .. ':dnsq')
end
if call ~= '' and (taken > 0 or #resolve > 0) then redis.call('SET', replay_key, cmsgpack.pack(out), 'PX', 120000) end
return epoch(out)
