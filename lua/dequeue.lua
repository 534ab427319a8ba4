#!lua flags=allow-oom
-- allow-oom: it frees at least what it stores, so it keeps the crawl going when
-- Redis is out of memory (maxmemory with noeviction).
-- dequeue: the one call a worker makes to take work. It acknowledges leases,
-- returns expired leases to their queues, releases due delayed requests, and
-- leases up to N requests of due domains, within each domain's token bucket
-- and minimum delay (and, per address, an address's turn), on the server's
-- clock. The main block at the end lists its phases in order.
-- Revisits (CRAWLER_RECRAWL, meta recrawl ~= 'off'; design/recrawl.md C.2
-- and E): a domain with tracked URLs is ready at the earlier of its queued
-- requests' turn and its first due revisit (due:<d>'s head). Each request
-- of its turn is a due revisit or its queue's head: one kind alone takes it;
-- when both wait, the credit rule (rdom:<d> rc += meta rv_share; rc >= 1:
-- the revisit, rc -= 1; rc kept in [0, 1 + share]). A revisit whose record
-- (hist:<d>) is gone leaves due:<d>; one visited less than rv_min ago waits
-- until then (stats rv_early); else it is re-armed in due:<d> (now + lease
-- + rv_min: a visit never written is not lost) and leased as the entry
-- "V<k>:<trust>:<mu>:<record>" (trust: bits of base:rhost:<host>, mu:
-- rdom:<d> mu) through the same gate, parking and token bucket as a queued
-- request, counted an admission (stats revisits). It changes neither the
-- domain's n nor stats queued. An expired revisit lease stays in due:<d>
-- (revisits -1, rv_expired +1; _lib.lua's requeue_lease); one handed back
-- (release.lua) is queued at its queue's front as its V entry, and when
-- leased from there is re-armed again.
-- KEYS[1]  base key of the frontier
-- KEYS[2]  its address space (optional; see _lib.lua's IPB)
-- ARGV[1]  maximum number of requests
-- ARGV[2]  lease duration, ms
-- ARGV[3]  default rate, requests per second (0: no token bucket)
-- ARGV[4]  default burst
-- ARGV[5]  default minimum delay between two requests to a domain, ms
-- ARGV[6]  call id ("" for none): a call sent again with the same id (its
--          reply was lost, the client retried) gets the first call's reply,
--          so no lease is taken twice and none is left without its worker;
--          the reply is kept as long as its leases (ARGV[2], and a second)
-- ARGV[7]  the id of this client's previous call, whose reply arrived: its
--          kept reply is deleted ("" for none), so a worker keeps one at most
-- ARGV[8]  number of lease ids to acknowledge, then the ids
-- then     number of history writes, then 11 values each (_recrawl.lua
--          read_writes), applied before the acknowledgements, in this call
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
-- The host is read from the entry as crawler/store/codec.py lays it out; an
-- entry laid out otherwise is counted (ip_layout_errors), logged, and handed
-- out uncharged, never charged to a host guessed from elsewhere in it.
-- Returns a list whose slots REPLY names (1-based; crawler/store/records.py's
-- Reply mirrors it, 0-based, and tests/test_lua_reply.py checks they agree):
--   now       the server's ms, the one reading of the clock of this call
--   next_due  ms of the earliest score of base:ready, base:delayed, the
--             first of base:rdue later than now (recrawl on) and, per
--             address, of ipdue and dnsq; -1: none
--   epoch     the epoch id ("" if none)
--   seq       the lease id counter, as this call leaves it
--   queued    the requests queued, as this call leaves it
--   lookups   {host, domain, ...}: names this worker is to look up
--   fenced    the frontier's latest failover fence, ms (0: never fenced)
--   fills     the fill jobs of the compact tier this call made (a head run
--             low with a block next): the caller runs the tier's jobs soon
--   leases    from this slot on, three per lease: id, record, address
local REPLY = {now = 1, next_due = 2, epoch = 3, seq = 4, queued = 5, lookups = 6, fenced = 7, fills = 8, leases = 9}

local base = KEYS[1]
local want = tonumber(ARGV[1])
local lease_ms = tonumber(ARGV[2])
local d_rate, d_burst, d_delay = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local call, previous = ARGV[6], ARGV[7]
local acks, at = read_list(8)
local writes
writes, at = recrawl.read_writes(at)
local expect_epoch, expect_seq, fencing = ARGV[at] or '', tonumber(ARGV[at + 1]) or 0, ARGV[at + 2] == '1'
local stats = base .. ':stats'
local ready = base .. ':ready'
local replay_key = base .. ':call:' .. call
local REPLAY_MARGIN_MS = 1000  -- a kept reply outlives its leases by this much
local OFFER_MS = 1000  -- an address offered to a waiter that did not take it is offered again after this

-- set by the main block: the clock of this call, the latest fence, the
-- frontier's defaults, the reply, and what the turns took
local now, fenced, ipc, gated, out, lookups
local taken, attempts, denials, took_all = 0, 0, 0, 0
-- the leases of this call, written at the end of the turns (write_leases()):
-- the last id given, and per lease its deadline and id (base:leases), its
-- id and record (base:lease). The ids are reserved at the first lease
-- (base:seq raised by what the call may still take, set back to the last
-- given at the end), so a call an error cut short gives no id twice.
local last_id, lease_deadlines, lease_records = nil, {}, {}

-- === the reply ===

-- a reply with nothing taken (yet)
local function new_reply()
  local r = {}
  r[REPLY.now], r[REPLY.next_due], r[REPLY.epoch], r[REPLY.seq] = now, -1, '', 0
  r[REPLY.queued], r[REPLY.lookups], r[REPLY.fenced], r[REPLY.fills] = 0, {}, fenced, 0
  return r
end

-- the reply's epoch fields, as this call leaves them (the epoch id read once:
-- a script is atomic)
local epoch_id = nil
local function with_epoch(r)
  epoch_id = epoch_id or redis.call('HGET', base .. ':epoch', 'id') or ''
  r[REPLY.epoch] = epoch_id
  r[REPLY.seq] = tonumber(redis.call('GET', base .. ':seq') or '0')
  r[REPLY.queued] = tonumber(redis.call('HGET', stats, 'queued') or '0') or 0
  r[REPLY.fenced] = fenced
  return r
end

-- the epoch the caller opened the frontier under is gone or replaced, or
-- the frontier went back in time: nothing is to be done
local function epoch_lost()
  if expect_epoch == '' then return false end
  epoch_id = redis.call('HGET', base .. ':epoch', 'id') or ''
  local seq = tonumber(redis.call('GET', base .. ':seq') or '0')
  return epoch_id ~= expect_epoch or seq < expect_seq
end

-- the reply kept for a retry of this call, if it was made already, less
-- the leases no longer held or past their time: one another call may have
-- requeued (or is about to requeue) is not handed out a second time
local function kept_reply()
  if call == '' then return nil end
  local done = redis.call('GET', replay_key)
  if not done then return nil end
  local r = cmsgpack.unpack(done)
  local held = {}
  for i = 1, REPLY.leases - 1 do held[i] = r[i] end
  for i = REPLY.leases, #r, 3 do
    local deadline = tonumber(redis.call('ZSCORE', base .. ':leases', r[i]))
    if deadline and deadline > now then
      held[#held + 1], held[#held + 2], held[#held + 3] = r[i], r[i + 1], r[i + 2]
    end
  end
  return held
end

-- kept as long as its leases are held (and a margin): a worker cut off
-- for less than a lease still gets its leases when it retries, the ones
-- still its own (kept_reply)
local function keep_reply()
  if call ~= '' and (taken > 0 or #lookups > 0) then
    redis.call('SET', replay_key, cmsgpack.pack(out), 'PX', lease_ms + REPLAY_MARGIN_MS)
  end
end

-- when the caller is to ask again: the earliest of the ready domains, the
-- delayed requests and, per address, the addresses to offer and the lookups
-- to reclaim (a delayed request joins its queue when its time comes)
local function next_due()
  local due = -1
  local function sooner(key)
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #first > 0 and (due < 0 or tonumber(first[2]) < due) then due = tonumber(first[2]) end
  end
  if ipc.order == 'rank' and redis.call('ZCARD', base .. ':front') > 0 then return now end
  sooner(ready)
  sooner(base .. ':delayed')
  if ipc.recrawl ~= 'off' then
    -- the first domain whose first revisit comes due later: a domain with one
    -- due already is in base:ready, or parked (its acknowledgement wakes it)
    -- or waiting on its address or name (below): no wake for it, nor a spin
    local first = redis.call('ZRANGEBYSCORE', base .. ':rdue', '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #first > 0 and (due < 0 or tonumber(first[2]) < due) then due = tonumber(first[2]) end
  end
  if gated then
    sooner(IPB .. ':ipdue')  -- an address frees: its waiter is offered it by the next call
    sooner(base .. ':dnsq')
  end
  return due
end

-- === the phases before the turns ===

-- leases past their deadline (their workers are gone): back to the front of
-- their queues; revisits back to their schedule (_lib.lua's requeue_lease)
local function requeue_expired()
  local expired = redis.call('ZRANGEBYSCORE', base .. ':leases', '-inf', now, 'LIMIT', 0, 200)
  for e = #expired, 1, -1 do  -- backwards: pushed to the front, they keep their order
    requeue_lease(base, expired[e], now, true)
  end
  if #expired > 0 then redis.call('HINCRBY', stats, 'leases_expired', #expired) end
end

-- delayed requests whose time has come: to the back of their queues
local function release_delayed()
  local due = redis.call('ZRANGEBYSCORE', base .. ':delayed', '-inf', now, 'LIMIT', 0, 500)
  for _, member in ipairs(due) do
    redis.call('ZREM', base .. ':delayed', member)
    local cut = string.find(member, '\n', 1, true)
    push_record(base, string.sub(member, cut + 1), false, now)
  end
  if #due > 0 then redis.call('HINCRBY', stats, 'delayed_released', #due) end
end

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

-- an address's state: requests in flight, when it is next due (the fence
-- applied), whether it is a shared front end, how many it takes at once, and
-- the waiter it was offered to
local function address_state(a)
  local v = redis.call('HMGET', IPB .. ':ip:' .. a, 'out', 'next', 'shared', 'offer')
  local shared = v[3] == '1'
  return tonumber(v[1] or '0') or 0, ip_fenced(tonumber(v[2] or '0') or 0, shared), shared,
         shared and ipc.shared_cap or 1, v[4]
end

-- per address: hand each address that is free and due to its first waiter
-- whose own turn has come (one a turn; a shared front end, one a start)
local function offer_free_addresses()
  local dueips = redis.call('ZRANGEBYSCORE', IPB .. ':ipdue', '-inf', now, 'LIMIT', 0, 64)
  for _, a in ipairs(dueips) do
    local busy, nxt, shared, cap = address_state(a)
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
          redis.call('HSET', IPB .. ':ip:' .. a, 'offer', head[1])
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
end

-- lookups claimed and never answered (their worker died): their domains come back, to claim them again
local function reclaim_lookups()
  local stale = redis.call('ZRANGEBYSCORE', base .. ':dnsq', '-inf', now, 'LIMIT', 0, 100)
  for _, host in ipairs(stale) do name_done(base, host, now) end
end

-- === a domain's queue ===

-- The request at the head of a domain's queue: its priority and entry,
-- taken off it (<take>) or left there; nil when the queue is empty, or
-- 'wait' when its head waits for a block a worker unpacks (_lib.lua's
-- tier_refill: the domain comes back when it is done, tier_done.lua). In
-- the in-link order (_lib.lua's promote()), a priority's promoted requests
-- come first, and a queued request promoted already is dropped when it
-- comes up (superseded_here counts them for serve()).
local superseded_here = 0
local function head_of(domain, take)
  local qp = base .. ':qp:' .. domain
  local dkey = base .. ':dom:' .. domain
  local inlinks = ipc.within == 'inlinks'
  while true do
    local top = redis.call('ZRANGE', qp, 0, 0)
    if #top == 0 then return nil end
    local prio = top[1]
    local q, z, s = tier_keys(base, domain, prio)
    local pq = base .. ':pq:' .. domain .. ':' .. prio
    local st, ppf, fpf, promoted, dropped = nil, nil, nil, nil, false
    if inlinks then
      local _
      _, ppf, fpf = position_fields(base, prio)
      st = redis.call('HMGET', dkey, 'pq', ppf, fpf, 'sk')
      if (tonumber(st[1] or '0') or 0) > 0 then
        if take then promoted = redis.call('LPOP', pq) else promoted = redis.call('LINDEX', pq, 0) end
        if promoted and take then redis.call('HINCRBY', dkey, 'pq', -1) end
      end
      if promoted then return prio, promoted end
      if (tonumber(st[3] or '0') or 0) == 0 and (tonumber(st[4] or '0') or 0) > 0 then
        local pos = (tonumber(st[2] or '0') or 0) + 1
        local sp = base .. ':sp:' .. domain .. ':' .. prio
        if redis.call('ZSCORE', sp, pos) and redis.call('LPOP', q) then
          redis.call('ZREM', sp, pos)
          redis.call('HINCRBY', dkey, 'sk', -1)
          redis.call('HINCRBY', dkey, ppf, 1)
          redis.call('HINCRBY', stats, 'superseded', 1)
          redis.call('HINCRBY', stats, 'queued', -1)
          superseded_here = superseded_here + 1
          dropped = true
        end
      end
    end
    if not dropped then
      local entry
      if take then entry = redis.call('LPOP', q) else entry = redis.call('LINDEX', q, 0) end
      if entry and take and inlinks then  -- one more taken off the front: in its turn, or put back there
        if (tonumber(st[3] or '0') or 0) > 0 then
          redis.call('HINCRBY', dkey, fpf, -1)
        else
          redis.call('HINCRBY', dkey, ppf, 1)
        end
      end
      local left = redis.call('LLEN', q)
      local waits, job = tier_refill(base, domain, prio, left, now)
      if job then out[REPLY.fills] = out[REPLY.fills] + 1 end
      if waits and not entry then return 'wait' end
      if entry then return prio, entry end
      if redis.call('EXISTS', q, z, s, pq) == 0 then
        redis.call('ZREM', qp, prio)
      elseif redis.call('LLEN', q) == 0 then
        return 'wait'  -- the spill was moved up: not here (the refill ran); a block is next
      end
    end
  end
end

-- === the address gate: the host, the decision, the writes ===

-- the n-byte big-endian number at i of s (nil past its end)
local function uint_at(s, i, n)
  local v = 0
  for k = i, i + n - 1 do
    local b = string.byte(s, k)
    if not b then return nil end
    v = v * 256 + b
  end
  return v
end

-- the msgpack str at i of s (fixstr, str8, str16, str32): its text and the
-- index after it; nil when there is none there
local STR_LEN = {[0xd9] = 1, [0xda] = 2, [0xdb] = 4}
local function str_at(s, i)
  local b = string.byte(s, i)
  if not b then return nil end
  local len
  if b >= 0xa0 and b <= 0xbf then
    len, i = b - 0xa0, i + 1
  elseif STR_LEN[b] then
    len, i = uint_at(s, i + 1, STR_LEN[b]), i + 1 + STR_LEN[b]
  end
  if len == nil or i + len - 1 > #s then return nil end
  return string.sub(s, i, i + len - 1), i + len
end

-- a revisit's entry (design/recrawl.md E) is "V<k>:<trust>:<mu>:<record>",
-- the record a tracked URL's history (crawler/recrawl/record.py): a fixed
-- part of REC_FIXED bytes whose first is its flags, REC_WARC more when flags
-- has REC_WARC_FLAG, the ETag (one length byte, then as many), then the
-- queue entry the URL was leased as ("U..." or "R...").
local REC_FIXED, REC_WARC, REC_WARC_FLAG = 39, 30, 1

-- the index at which the queue entry inside the history record at <i> of
-- <s> starts (nil: cut short)
local function record_entry_at(s, i)
  local flags = string.byte(s, i)
  if not flags then return nil end
  local e = i + REC_FIXED
  if flags % (2 * REC_WARC_FLAG) >= REC_WARC_FLAG then e = e + REC_WARC end
  local etag = string.byte(s, e)
  if not etag or e + etag + 1 > #s then return nil end
  return e + etag + 1
end

-- the URL of a queued entry, as crawler/store/codec.py lays it out:
-- "U<depth> <url>", or "R" + a msgpack map (fixmap, map16, map32) whose
-- first key is "url", a str; read without unpacking the rest; of a revisit
-- ("V", above), its inner entry's. nil when the entry is laid out otherwise
local MAP_HEADER = {[0xde] = 3, [0xdf] = 5}
local function url_of(entry)
  local kind = string.sub(entry, 1, 1)
  if kind == 'V' then
    local at = revisit_parts(entry)
    local inner = at and record_entry_at(entry, at)
    local ik = inner and string.sub(entry, inner, inner)
    if ik ~= 'U' and ik ~= 'R' then return nil end
    return url_of(string.sub(entry, inner))
  end
  if kind == 'U' then
    local space = string.find(entry, ' ', 1, true)
    return space and string.sub(entry, space + 1)
  end
  if kind ~= 'R' then return nil end
  local b = string.byte(entry, 2)
  if not b then return nil end
  local i = (b >= 0x81 and b <= 0x8f) and 3 or MAP_HEADER[b] and 2 + MAP_HEADER[b]
  if not i then return nil end
  local key, j = str_at(entry, i)
  if key ~= 'url' then return nil end
  return (str_at(entry, j))
end

-- the host of a queued entry (lower case); else nil and why: 'layout' (the
-- entry is not laid out as codec.py says), 'nohost' (its URL has no host)
local function host_of(entry)
  local url = url_of(entry)
  if url == nil then return nil, 'layout' end
  local s = string.find(url, '//', 1, true)
  if not s then return nil, 'nohost' end
  local hostport = string.match(string.sub(url, s + 2), '^[^/?#]*')
  hostport = string.match(hostport, '[^@]*$')
  local host = string.match(hostport, '^%[([^%]]*)%]') or string.match(hostport, '^[^:]*')
  if host == nil or host == '' then return nil, 'nohost' end
  return string.lower(host)
end

-- The name's side of the gate, read only: the addresses of <host> and the
-- round-robin place to start from, with its record's key; or a decision
-- ({hand = '!nx'/'!refused'}, {postpone = ms}, {lookup = host, claim = bool}).
local function addresses_of(host)
  if string.find(host, ':', 1, true) or string.match(host, '^[%d%.]+$') then
    return {host}, 0, nil  -- an address in the URL is its own record
  end
  local dk = base .. ':dns:' .. host
  local r = redis.call('HMGET', dk, 'st', 'a', 'exp', 'until', 'cl', 'rr')
  local st, exp = r[1], tonumber(r[3] or '0') or 0
  if st == 'nx' or st == 'refused' then
    if exp > now then return nil, nil, nil, {hand = '!' .. st} end
    st = nil  -- a missing name's record ran out: look again
  elseif st == 'retry' then
    local u = tonumber(r[4] or '0') or 0
    if u > now then return nil, nil, nil, {postpone = u} end  -- nothing lost
    st = nil
  elseif st == 'ok' and exp <= now then
    st = nil  -- its time is up: looked up again before the next request (a failed lookup keeps it a while)
  end
  if st ~= 'ok' then
    return nil, nil, nil, {lookup = host, claim = (tonumber(r[5] or '0') or 0) <= now, dk = dk}
  end
  local addrs = {}
  for a in string.gmatch(r[2], '%S+') do addrs[#addrs + 1] = a end
  if #addrs == 0 then return nil, nil, nil, {hand = '!refused'} end
  return addrs, tonumber(r[6] or '0') or 0, dk
end

-- The gate's decision for the head request <entry> of <domain>, read only
-- (route_apply() makes its writes). One of:
--   {go = address, shared = bool, offered = bool, rr = next place or nil, dk = record key}
--   {hand = address, count = stat or nil}: handed out uncharged ('') or
--     unsent ('!nx', '!refused')
--   {postpone = ms}: its name's lookup failed a while ago; tried again then
--   {lookup = host, claim = bool, dk = record key}: waits for the name's lookup
--   {wait = address, due = ms or nil}: every address busy or not due
local function route(domain, entry)
  local host, why = host_of(entry)
  if host == nil then
    return {hand = '', count = why == 'layout' and 'ip_layout_errors' or 'ip_unreadable'}
  end
  local addrs, rr, dk, decided = addresses_of(host)
  if decided then return decided end
  local best, best_t = nil, nil
  local me = base .. '\n' .. domain
  for i = 0, #addrs - 1 do
    local a = addrs[(rr + i) % #addrs + 1]
    local busy, nxt, shared, cap, offer = address_state(a)
    if busy < cap then
      -- free and due: its waiters go first, in turn (the one offered it, or none waiting)
      local mine = offer == me
      if nxt <= now and (mine or redis.call('EXISTS', IPB .. ':ipwait:' .. a) == 0) then
        return {go = a, shared = shared, offered = mine, dk = dk,
                rr = (dk and #addrs > 1) and (rr + i + 1) % #addrs or nil}
      end
      if best_t == nil or nxt < best_t then best, best_t = a, nxt end
    elseif best == nil then
      best = a
    end
  end
  return {wait = best, due = best_t}
end

-- the domain waits for its host's lookup, claimed for this worker if no one has it
local function wait_for_lookup(domain, d)
  if d.claim then
    local deadline = now + ipc.claim
    redis.call('HSET', d.dk, 'cl', deadline)
    redis.call('ZADD', base .. ':dnsq', deadline, d.lookup)
    lookups[#lookups + 1] = d.lookup
    lookups[#lookups + 1] = domain
  end
  redis.call('SADD', base .. ':dnswait:' .. d.lookup, domain)
  redis.call('ZREM', ready, domain)
end

-- every address busy or not due: the domain waits on the one that frees first
local function wait_for_address(domain, d)
  local dnext = tonumber(redis.call('HGET', base .. ':dom:' .. domain, 'next') or '0') or 0
  redis.call('ZREM', ready, domain)
  -- NX: a domain already waiting keeps its place (new URLs put it back in ready meanwhile)
  if redis.call('ZADD', IPB .. ':ipwait:' .. d.wait, 'NX', math.max(dnext, now), base .. '\n' .. domain) == 1 then
    redis.call('HINCRBY', IPB .. ':stats', 'ip_waiting', 1)
  end
  redis.call('HINCRBY', stats, 'ip_denials', 1)
  if d.due ~= nil then redis.call('ZADD', IPB .. ':ipdue', 'LT', d.due, d.wait) end
end

-- The writes of the gate's decision <d> for <domain>. Returns where its head
-- request goes now: an address (and whether it is a shared front end), ''
-- (uncharged), '!nx' or '!refused'; nil when the domain waits, moved off
-- base:ready (or to a later score) here.
local function route_apply(domain, entry, d)
  if d.go then
    if d.offered then redis.call('HDEL', IPB .. ':ip:' .. d.go, 'offer') end
    if d.rr then redis.call('HSET', d.dk, 'rr', d.rr) end
    return d.go, d.shared
  elseif d.hand then
    if d.count then redis.call('HINCRBY', stats, d.count, 1) end
    if d.count == 'ip_layout_errors' then
      redis.log(redis.LOG_WARNING, 'dequeue.lua: ' .. base .. ': a request of ' .. domain ..
                ' is not laid out as crawler/store/codec.py says (' .. string.sub(entry, 1, 16) ..
                '...): handed out without its address turn')
    end
    return d.hand
  elseif d.postpone then
    redis.call('ZADD', ready, d.postpone, domain)
  elseif d.lookup then
    wait_for_lookup(domain, d)
  else
    wait_for_address(domain, d)
  end
  return nil
end

-- lease <id> is charged to address <a>
local function charge(id, a, shared)
  redis.call('HSET', base .. ':leasea', id, a)
  present[base .. ':leasea'] = true
  local k = IPB .. ':ip:' .. a
  redis.call('HINCRBY', k, 'out', 1)
  redis.call('HINCRBY', k, 'served', 1)
  if shared then redis.call('HSET', k, 'next', now + ipc.shared_delay) end
end

-- === a domain's turn ===

-- excluded while queued: its requests are dropped, never fetched
local function drop_excluded(domain, dkey)
  if not has(base .. ':excluded') or redis.call('SISMEMBER', base .. ':excluded', domain) == 0 then return false end
  local dropped = tonumber(redis.call('HGET', dkey, 'n') or '0') or 0
  tier_drop(base, domain)
  redis.call('HSET', dkey, 'n', 0)
  redis.call('ZREM', ready, domain)
  redis.call('HINCRBY', stats, 'queued', -dropped)
  redis.call('HINCRBY', stats, 'excluded_dropped', dropped)
  recrawl.recrawl_drop(base, domain)
  return true
end

-- lease the request <entry> of <domain> to this worker, charged to <address>
-- when it is one; returns whether it is sent (not "!nx", "!refused") and
-- its lease id. The domain's own writes (dom 'given', 'busy') are the
-- turn's (end_turn()), the lease's the call's (write_leases()).
local function lease(domain, prio, entry, address, shared)
  taken = taken + 1
  if last_id == nil then last_id = redis.call('INCRBY', base .. ':seq', want - taken + 1) - (want - taken + 1) end
  last_id = last_id + 1
  local id = tostring(last_id)
  local rec = domain .. '\n' .. prio .. '\n' .. entry
  lease_deadlines[#lease_deadlines + 1] = now + lease_ms
  lease_deadlines[#lease_deadlines + 1] = id
  lease_records[#lease_records + 1] = id
  lease_records[#lease_records + 1] = rec
  out[#out + 1] = id
  out[#out + 1] = rec
  out[#out + 1] = address
  local sent = string.sub(address, 1, 1) ~= '!'
  if sent and address ~= '' then charge(id, address, shared) end
  return sent, id
end

-- the leases of the turns, in one write per key; the counters the turns kept
local function write_leases()
  if last_id then
    redis.call('SET', base .. ':seq', tostring(last_id))
    call_each('ZADD', base .. ':leases', lease_deadlines)
    call_each('HSET', base .. ':lease', lease_records)
  end
  if took_all > 0 then redis.call('HINCRBY', stats, 'queued', -took_all) end
end

-- a domain's turn is over: <took> requests taken off its queue, <n> left,
-- <tokens> in its bucket, <busy> the lease of this turn that parked it (nil:
-- none), <given> (the rank order: the requests it was given, nil when
-- unchanged), each written with the others;
-- its next place in base:ready (unless the gate moved it: <waits>): the
-- earlier of its queued requests' and its first revisit's turn
-- (_lib.lua's ready_score), or none
local function end_turn(domain, dkey, n, tokens, took, waits, busy, rate, burst, given)
  took_all = took_all + took
  local also = {}  -- in the rank order, the requests it was given; parked, its lease
  if given then also[#also + 1] = 'given'; also[#also + 1] = given end
  if busy then also[#also + 1] = 'busy'; also[#also + 1] = busy end
  if waits then  -- the gate moved the domain: off base:ready, or to a later score
    redis.call('HSET', dkey, 'n', n, 'tokens', tokens, 'ts', now, unpack(also))
    return
  end
  local nxt = now
  if rate > 0 and tokens < 1 then nxt = math.max(nxt, now + math.ceil((1 - tokens) * 1000 / rate)) end
  if rate <= 0 then tokens = burst end
  redis.call('HSET', dkey, 'n', n, 'tokens', tokens, 'ts', now, 'next', nxt, unpack(also))
  local score = not busy and ready_score(base, domain, n > 0 and nxt or nil, nxt)
  if score then
    redis.call('ZADD', ready, score, domain)
  else
    redis.call('ZREM', ready, domain)
  end
end

-- === revisits (CRAWLER_RECRAWL; design/recrawl.md C.2 and E) ===

-- a turn looks at no more than this many due revisits it cannot take (gone,
-- or too early after their last visit) before it lets the queue have it
local RV_SKIPS = 8

-- bits of the validators not to send to <host> (base:rhost:<host>): 1 no
-- If-None-Match, 2 no If-Modified-Since, 4 none at all; each while its ms
-- is in the future
local function trust_of(host)
  if host == nil then return 0 end
  local v = redis.call('HMGET', base .. ':rhost:' .. host, 'etag', 'lm', 'all')
  local bits = 0
  if (tonumber(v[1] or '') or 0) > now then bits = bits + 1 end
  if (tonumber(v[2] or '') or 0) > now then bits = bits + 2 end
  if (tonumber(v[3] or '') or 0) > now then bits = bits + 4 end
  return bits
end

-- one domain's revisits, for its turn in serve(): the credit rule between
-- them and its queued requests, and the due revisit the turn may take
local function new_revisits(domain)
  local self = {waited = false, leased = 0}
  local due = base .. ':due:' .. domain
  local hist = base .. ':hist:' .. domain
  local rdom = base .. ':rdom:' .. domain
  local share = math.max(0, math.min(1, ipc.rv_share))
  local credit, mu = nil, nil  -- rdom 'rc' and 'mu', read when first needed
  local credited = false  -- the credit changed: written at the end
  local moved = false  -- due:<d> changed: base:rdue follows its head at the end
  local skips = 0
  local k, rec = nil, nil  -- the due revisit found, until it is taken

  local function load()
    if credit == nil then
      local v = redis.call('HMGET', rdom, 'rc', 'mu')
      credit, mu = tonumber(v[1] or '') or 0, v[2] or ''
    end
  end

  -- the first due revisit that may go now, if any: a URL whose record is
  -- gone leaves the schedule; one visited less than rv_min ago (a lost
  -- write, a lease given twice) waits until rv_min after that visit
  function self.candidate()
    while k == nil and skips < RV_SKIPS do
      local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
      if #head == 0 or tonumber(head[2]) > now then return nil end
      local r = redis.call('HGET', hist, head[1])
      local last = r and uint_at(r, 2, 4)
      if not last then
        redis.call('ZREM', due, head[1])
        moved = true
        skips = skips + 1
      elseif now - last * 1000 < ipc.rv_min then
        redis.call('ZADD', due, last * 1000 + ipc.rv_min, head[1])
        redis.call('HINCRBY', stats, 'rv_early', 1)
        moved = true
        skips = skips + 1
      else
        k, rec = head[1], r
      end
    end
    if k then self.waited = true end
    return k
  end

  -- which kind takes this turn, <queued>: whether requests are queued; 'v'
  -- (a revisit), 'q' (the queue's head) or nil (neither waits), and the
  -- credit after it if the turn is taken (nil: one kind alone, unchanged)
  function self.pick(queued)
    local found = self.candidate()
    if found and queued then
      load()
      local c = credit + share
      local kind = 'q'
      if c >= 1 - 1e-9 then kind, c = 'v', c - 1 end  -- 1e-9: ten shares of 0.1 make a turn
      return kind, math.max(0, math.min(1 + share, c))
    end
    if found then return 'v' end
    if queued then return 'q' end
    return nil
  end

  -- the turn went to the kind picked: its credit is kept
  function self.taken(c)
    if c ~= nil and c ~= credit then credit, credited = c, true end
  end

  -- the due revisit's entry, "V<k>:<trust>:<mu>:<record>", as the gate and the lease see it
  function self.entry()
    load()
    local at = record_entry_at(rec, 1)
    local host = at and host_of(string.sub(rec, at))
    return 'V' .. k .. ':' .. trust_of(host) .. ':' .. mu .. ':' .. rec
  end

  -- the revisit is leased: if its visit never comes back, it is due again
  -- rv_min after its lease runs out (re-armed); counted an admission
  function self.lease()
    redis.call('ZADD', due, now + lease_ms + ipc.rv_min, k)
    moved = true
    self.leased = self.leased + 1
    k, rec = nil, nil
  end

  -- a revisit queued as its V entry (handed back unsent) is leased again:
  -- re-armed likewise, if still tracked (it keeps its admission)
  function self.requeued(entry)
    local _, rk = revisit_parts(entry)
    if rk and redis.call('ZADD', due, 'XX', 'CH', now + lease_ms + ipc.rv_min, rk) == 1 then moved = true end
  end

  -- the turn is over: the counters, the credit, base:rdue
  function self.finish()
    if self.leased > 0 then redis.call('HINCRBY', stats, 'revisits', self.leased) end
    if credited then redis.call('HSET', rdom, 'rc', credit) end
    if moved then
      local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
      if #head == 0 then
        redis.call('ZREM', base .. ':rdue', domain)
      else
        redis.call('ZADD', base .. ':rdue', head[2], domain)
      end
    end
  end
  return self
end

-- with recrawl off: no revisit is served, the queue has every turn (and
-- nothing is made per turn on the hot path). A revisit queued as its V entry
-- is leased as any queued request; its due:<d> time is left as it is (a
-- visit written since holds it to MIN by its record's last).
local NO_REVISITS = {waited = false}
function NO_REVISITS.pick(queued) if queued then return 'q' end return nil end
function NO_REVISITS.taken() end
function NO_REVISITS.requeued() end
function NO_REVISITS.finish() end

-- its head waits for a block a worker unpacks: out of base:ready until the
-- block is in (tier_done.lua puts it back)
local function starved(domain)
  redis.call('ZREM', ready, domain)
  redis.call('HSET', base .. ':dom:' .. domain, 'tw', 1)
  redis.call('HINCRBY', stats, 'tier_waits', 1)
end

-- a due domain's turn: its token bucket, its delay (a fence's hold first),
-- and per address its address's turn. Each request it gives is a due
-- revisit or its queue's head, picked by the credit rule (new_revisits).
local function serve(domain, dkey)
  local st = redis.call('HMGET', dkey, 'n', 'tokens', 'ts', 'busy', 'next', 'given')
  if st[4] then  -- parked: its request is out (never ready; kept out if put back by hand)
    redis.call('ZREM', ready, domain)
    return
  end
  local nxt = tonumber(st[5] or '') or 0
  if nxt > now then  -- pushed back since it came due (push_domain.lua: waiting in base:front)
    redis.call('ZADD', ready, nxt, domain)
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
  local rv = ipc.recrawl ~= 'off' and new_revisits(domain) or NO_REVISITS
  local took, waits, busy, gave = 0, false, nil, 0
  while taken < want do
    if rate > 0 and tokens < 1 then break end
    local kind, credit = rv.pick(n > 0)
    if kind == nil then break end
    local prio, entry = nil, nil
    if kind == 'v' then
      prio, entry = '0', rv.entry()
    elseif gated then
      prio, entry = head_of(domain, false)
    end
    n, superseded_here = n - superseded_here, 0
    if prio == 'wait' then waits = true; starved(domain); break end
    local address, shared = '', false
    if gated and entry then
      address, shared = route_apply(domain, entry, route(domain, entry))
      if address == nil then waits = true; break end
    end
    if kind == 'q' then prio, entry = head_of(domain, true) end
    n, superseded_here = n - superseded_here, 0
    if prio == 'wait' then waits = true; starved(domain); break end
    if prio == nil then
      n = 0  -- its queue was empty after all: the other kind, if it waits
    else
      rv.taken(credit)
      if kind == 'v' then
        rv.lease()
      else
        n = n - 1
        took = took + 1
        if string.sub(entry, 1, 1) == 'V' then rv.requeued(entry) end
      end
      tokens = tokens - 1
      gave = gave + 1
      local sent, id = lease(domain, prio, entry, address, shared)
      if delay > 0 and sent then
        busy = id  -- parked until this lease is acknowledged (end_turn() writes it)
        break
      end
      if gated and sent then break end  -- one request a turn of its address
    end
  end
  if gave == 0 and (n > 0 or rv.waited) then denials = denials + 1 end
  rv.finish()
  local given = ipc.order == 'rank' and gave > 0 and (tonumber(st[6] or '0') or 0) + gave or nil
  end_turn(domain, dkey, n, tokens, took, waits, busy, rate, burst, given)
end

-- one due domain's turn
local function turn(domain)
  attempts = attempts + 1
  local dkey = base .. ':dom:' .. domain
  if not drop_excluded(domain, dkey) then serve(domain, dkey) end
end

-- meta order 'rank' (docs/frontier.md): due domains wait in base:front,
-- scored by their priority, (1 + their weight) / (1 + requests they were
-- given): _lib.lua's domain_weight()
local FRONT_MOVE = 1000  -- due domains moved into base:front per call at most
local function priority_of(domain)
  local dkey = base .. ':dom:' .. domain
  local st = redis.call('HMGET', dkey, 'given', 'w', 'wt')
  return (1 + domain_weight(base, domain, dkey, st[2], st[3], now)) / (1 + (tonumber(st[1] or '0') or 0))
end

-- the due domains, until <want> requests are taken: in order of their turn
-- (meta order 'due'), or of their priority (meta order 'rank')
local function serve_due_domains()
  if ipc.order == 'rank' then
    local front = base .. ':front'
    local due = redis.call('ZRANGEBYSCORE', ready, '-inf', now, 'LIMIT', 0, FRONT_MOVE)
    for _, domain in ipairs(due) do redis.call('ZADD', front, priority_of(domain), domain) end
    for i = 1, #due, 500 do redis.call('ZREM', ready, unpack(due, i, math.min(i + 499, #due))) end
    while taken < want do
      local best = redis.call('ZPOPMAX', front)
      if #best == 0 then break end
      turn(best[1])
    end
  else
    for _, domain in ipairs(redis.call('ZRANGEBYSCORE', ready, '-inf', now, 'LIMIT', 0, want)) do
      if taken >= want then break end
      turn(domain)
    end
  end
  write_leases()
  if taken > 0 then redis.call('HINCRBY', stats, 'dequeued', taken) end
  if attempts > 0 then redis.call('HINCRBY', stats, 'attempts', attempts) end
  if denials > 0 then redis.call('HINCRBY', stats, 'denials', denials) end
end

-- === the order of work ===

if previous ~= '' then redis.call('DEL', base .. ':call:' .. previous) end  -- its reply arrived
-- one reading of the clock for the acks and the take, so the take sees the
-- marks as the acks placed them (1 ms late), however long this call runs
now = now_ms()
fenced = fencing and fence(base, now) or 0  -- first: its counter jump keeps the epoch check quiet
if epoch_lost() then return with_epoch(new_reply()) end
recrawl.history_write(base, writes, now)
ack_all(base, acks, now)                     -- 1. acknowledge
local kept = kept_reply()                    -- 2. replay a retried call
if kept then return with_epoch(kept) end
requeue_expired()                            -- 3. expired leases back to their queues
release_delayed()                            -- 4. due delayed requests into their queues
ipc = defaults(base)
gated = ipc.ip_delay > 0
out = new_reply()
lookups = out[REPLY.lookups]
if gated then
  offer_free_addresses()                     -- 5. free addresses to their waiters
  reclaim_lookups()                          -- 6. lookups never answered, claimed again
end
serve_due_domains()                          -- 7. due domains' turns: the leases
out[REPLY.next_due] = next_due()             -- 8. the reply: when to ask again,
keep_reply()                                 --    kept for a retry,
return with_epoch(out)                       --    with the epoch's fields
