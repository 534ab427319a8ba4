-- Shared helpers, prepended to every script of this folder by
-- crawler/store/keys.py. KEYS[1] of every script is the frontier's
-- base key, "<prefix>:{<spider>:<shard>}"; KEYS[2], when given, the address
-- space (IPB below); the names built from them, and what each key holds,
-- are in the one key layout table: crawler/store/keys.py.
-- A record is "<domain>\n<priority>\n<serialized request>".

-- The frontier's clock, ms. CLOCK_KEY: nil (the server's TIME), or the key
-- of a test clock (crawler/clock.py ManualClock) that crawler/store/keys.py
-- writes into the next line as sent, on one line, for tests on one Redis only.
local CLOCK_KEY = nil
local function now_ms()
  if CLOCK_KEY then
    return tonumber(redis.call('GET', CLOCK_KEY) or error('manual clock key ' .. CLOCK_KEY .. ' is not set'))
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The failover fence (a Redis Cluster's frontier; docs/operations.md). The
-- epoch record (base:epoch) names the node that writes the frontier, 'node'
-- (its CLUSTER MYID). A script that finds another node named there runs on a
-- replica promoted since: replication is asynchronous, so what the old master
-- wrote last may be missing here, the last politeness marks and leases among
-- it. It fences the frontier ('fenced' = now, 'from' = the old node): no
-- domain and no address of it is served before one full delay from now
-- (fence_hold() in dequeue.lua), and the lease id counter jumps FENCE_SEQ so
-- no lease id the old master gave out (still held by a worker) names a new
-- lease, and the workers' epoch check (a counter lower than seen: a rewind)
-- does not take the replica's few missing writes for a lost frontier.
-- Returns the ms of the frontier's latest fence (0: never fenced). Without an
-- epoch record (no frontier here, or it vanished: the epoch check says so)
-- it does nothing. A frontier made before this fence existed has no 'node':
-- the first look names the node and fences nothing.
local FENCE_SEQ = 1000000
local function fence(base, now)
  local key = base .. ':epoch'
  local rec = redis.call('HMGET', key, 'id', 'node', 'fenced')
  local fenced = tonumber(rec[3] or '0') or 0
  if not rec[1] then return fenced end
  local me = redis.call('CLUSTER', 'MYID')
  if rec[2] == me then return fenced end
  if not rec[2] then
    redis.call('HSET', key, 'node', me)
    return fenced
  end
  redis.call('HSET', key, 'node', me, 'fenced', now, 'from', rec[2])
  redis.call('INCRBY', base .. ':seq', FENCE_SEQ)
  redis.call('HINCRBY', base .. ':stats', 'failover_fences', 1)
  return now
end

local function split_record(rec)
  local i = string.find(rec, '\n', 1, true)
  local j = string.find(rec, '\n', i + 1, true)
  return string.sub(rec, 1, i - 1), string.sub(rec, i + 1, j - 1), string.sub(rec, j + 1)
end

-- The frontier's politeness defaults (base:meta), read once per script call:
-- per domain, and per address (ms): ip_delay (0: off), ip_shared_delay,
-- ip_shared_cap, ip_shared_min, dns_ttl, dns_nx (lookups of a missing name
-- before it is given up), dns_claim (how long a lookup may take before
-- another worker tries); recrawl ('off', 'fixed', 'adaptive'), rv_min, rv_max,
-- rv_distrust (ms), rv_share, rv_cap, rv_domain_cap (design/recrawl.md E);
-- head, block: the compact tier's (push() below; 0: no tier); order, of
-- the due domains: 'due' (their turn) or 'rank' (dequeue.lua); within, a
-- domain's: 'fifo' or 'inlinks' (promote() below), and wgen, the generation
-- of its positions (a new one each time a frontier turns 'inlinks' on).
local defaults_cache = nil
local function defaults(base)
  if defaults_cache == nil then
    local v = redis.call('HMGET', base .. ':meta', 'rate', 'burst', 'delay', 'delay_factor', 'delay_max',
                         'ip_delay', 'ip_shared_delay', 'ip_shared_cap', 'ip_shared_min', 'dns_ttl', 'dns_nx',
                         'dns_claim', 'recrawl', 'rv_min', 'rv_max', 'rv_share', 'rv_cap', 'rv_domain_cap',
                         'rv_distrust', 'head', 'block', 'order', 'within', 'wgen')
    defaults_cache = {rate = tonumber(v[1] or '') or 0, burst = tonumber(v[2] or '') or 1,
                      delay = tonumber(v[3] or '') or 0, factor = tonumber(v[4] or '') or 0,
                      max = tonumber(v[5] or '') or 0,
                      ip_delay = tonumber(v[6] or '') or 0, shared_delay = tonumber(v[7] or '') or 250,
                      shared_cap = tonumber(v[8] or '') or 4, shared_min = tonumber(v[9] or '') or 0,
                      ttl = tonumber(v[10] or '') or 300000, nx = tonumber(v[11] or '') or 3,
                      claim = tonumber(v[12] or '') or 65000,
                      recrawl = v[13] or 'off', rv_min = tonumber(v[14] or '') or 3600000,
                      rv_max = tonumber(v[15] or '') or 2592000000, rv_share = tonumber(v[16] or '') or 0.5,
                      rv_cap = tonumber(v[17] or '') or 0, rv_domain_cap = tonumber(v[18] or '') or 0,
                      rv_distrust = tonumber(v[19] or '') or 2592000000,
                      head = tonumber(v[20] or '') or 0, block = tonumber(v[21] or '') or 64,
                      order = v[22] or 'due', within = v[23] or 'fifo', wgen = v[24] or '0'}
  end
  return defaults_cache
end

-- Whether <key> exists, looked up once a call: for the keys a frontier
-- may never have (overrides, robots.txt delays, exclusions, address
-- charges), so a call reads a domain's entry in them only when there are
-- any. Only for keys no script of this folder creates during a call, or
-- whose creator marks them here (dequeue.lua's charge()).
local present = {}
local function has(key)
  local p = present[key]
  if p == nil then
    p = redis.call('EXISTS', key) == 1
    present[key] = p
  end
  return p
end

-- ``cmd key <list...>`` in calls of at most 500 values (Lua's stack); an
-- array reply's items joined in order (a command that replies otherwise:
-- an empty table)
local function call_each(cmd, key, list)
  local joined = {}
  for i = 1, #list, 500 do
    local r = redis.call(cmd, key, unpack(list, i, math.min(i + 499, #list)))
    if type(r) == 'table' then
      for j = 1, math.min(500, #list - i + 1) do joined[i + j - 1] = r[j] end
    end
  end
  return joined
end

-- A domain's weight, what its place in the rank order and its budget grow
-- with (docs/frontier.md): a ranking file's (base:rank) else the domains seen
-- linking to it (base:inl:<d>, a HyperLogLog the workers add to). Counted at
-- each call while under LINKS_DENSE (a sparse HyperLogLog counts cheaply);
-- past it (a dense one reads its 16,384 registers) at most every
-- LINKS_RECOUNT_MS, kept in dom:<d> 'w' and 'wt' (<w>, <wt>: their values as
-- read by the caller) between. The domains so weighed are counted by decade
-- of their count in :stats 'wd:<k>' (k = 0 for none, 1 for 1-9, 2 for 10-99...).
local LINKS_RECOUNT_MS, LINKS_DENSE = 600000, 1000
local function decade(n)
  if n < 1 then return 0 end
  return #tostring(math.floor(n))
end
local ranks_loaded = nil  -- whether base:rank holds a ranking, read once a call
local function domain_weight(base, domain, dkey, w, wt, now)
  if ranks_loaded == nil then ranks_loaded = redis.call('EXISTS', base .. ':rank') == 1 end
  local ranked = ranks_loaded and tonumber(redis.call('HGET', base .. ':rank', domain) or '')
  if ranked then return ranked end
  local was = tonumber(w or '')
  w = was
  if not w or w < LINKS_DENSE or now - (tonumber(wt or '0') or 0) >= LINKS_RECOUNT_MS then
    w = redis.call('PFCOUNT', base .. ':inl:' .. domain)
    -- 'wt' matters only to a dense count: a sparse one unchanged is not written again
    if w ~= was or w >= LINKS_DENSE then redis.call('HSET', dkey, 'w', w, 'wt', now) end
    local k = decade(w)
    if was == nil or decade(was) ~= k then
      local stats = base .. ':stats'
      if was ~= nil then redis.call('HINCRBY', stats, 'wd:' .. decade(was), -1) end
      redis.call('HINCRBY', stats, 'wd:' .. k, 1)
    end
  end
  return w
end

-- The compact tier (docs/frontier.md). A domain's queue at priority <p> is
-- three lists, served in this order: q:<d>:<p>, the head (raw records,
-- what dequeue.lua pops); z:<d>:<p>, blocks (each a run of records the
-- workers compressed: "<count>\n<zlib bytes>"), oldest first; s:<d>:<p>, the
-- spill (raw records, newest last). A record goes to the head's end while
-- the head holds fewer than meta 'head' records and neither other list holds
-- any (head 0: while neither holds any), else to the spill's end; one
-- given back goes to the head's front. Nothing is dropped: the lists only
-- move records up, z and s in the order they came. The workers' jobs wait in
-- base:tiers, "<kind>\n<d>\n<p>" -> ms from which one may take it (a taken
-- job is claimed: its score moves past now; tier_take.lua, tier_done.lua):
-- 'p' packs the first meta 'block' records of a full spill into a block,
-- 'f' unpacks the first block into a head run low. The fields of dom:<d>
-- 'so:<p>' and 'zo:<p>' count records taken off the spill's front and blocks
-- off z's front: a job's reply is applied only if its count is unchanged.
-- :stats 'spill', 'compact', 'compact_bytes': what the spills and blocks hold now.
local function tier_keys(base, domain, prio)
  local tail = domain .. ':' .. prio
  return base .. ':q:' .. tail, base .. ':z:' .. tail, base .. ':s:' .. tail
end

-- a job for the workers, unless it waits already; whether it is new
local function tier_job(base, kind, domain, prio, at)
  return redis.call('ZADD', base .. ':tiers', 'NX', at, kind .. '\n' .. domain .. '\n' .. prio) == 1
end

-- the records a block holds, read from its "<count>\n" without unpacking it
local function block_count(block)
  return tonumber(string.match(block, '^(%d+)\n'))
end

-- whether a head holding <len> records has run low: empty, or under half
-- of meta 'head' (a fill is due)
local function head_low(base, len)
  return len == 0 or len * 2 < defaults(base).head
end

-- The in-link order (within = 'inlinks', docs/frontier.md): a domain's
-- queue at a priority is first in first out, so each request put at its end
-- has a position, and it is still queued exactly while the requests taken
-- off its front (those put back at the front aside) have not reached it.
-- dom:<d> fields, of generation g (meta wgen): 'ad<g>:<p>' the positions
-- given, 'pp<g>:<p>' the requests taken off the front in their turn,
-- 'fp<g>:<p>' those put back at the front and not yet taken again.
local function position_fields(base, prio)
  local g = defaults(base).wgen
  return 'ad' .. g .. ':' .. prio, 'pp' .. g .. ':' .. prio, 'fp' .. g .. ':' .. prio
end

-- the requests of <domain> at <prio> in its queue's lists, the head's
-- included (whatever was put back at its front: a first count only)
local function fifo_length(base, domain, prio)
  local q, z, s = tier_keys(base, domain, prio)
  local n = redis.call('LLEN', q) + redis.call('LLEN', s)
  for _, block in ipairs(redis.call('LRANGE', z, 0, -1)) do n = n + (block_count(block) or 0) end
  return n
end

-- <k> more requests queued for <domain> at <prio>: the priority among its
-- queue's, the requests counted, and the domain ready unless parked (its
-- first queued requests bring forward a domain ready only for its revisits:
-- LT; else a domain ready already keeps its place: NX)
local function queued_more(base, domain, prio, k, now, uncounted)
  redis.call('ZADD', base .. ':qp:' .. domain, -tonumber(prio), prio)
  local dkey = base .. ':dom:' .. domain
  local n = redis.call('HINCRBY', dkey, 'n', k)
  local st = redis.call('HMGET', dkey, 'next', 'busy')
  if not st[2] then  -- a parked domain becomes ready when its request is done
    redis.call('ZADD', base .. ':ready', n == k and 'LT' or 'NX', math.max(now, tonumber(st[1] or '0') or 0), domain)
  end
  if not uncounted then redis.call('HINCRBY', base .. ':stats', 'queued', k) end
end

-- Queues <entries> (a list, in their order) of <domain> at <prio>: at the
-- head's front (<front>: requests given back) or after everything queued
-- (the head's end while it has room and nothing is past it, the rest to the
-- spill's end), in one write per list; counted in :stats 'queued' unless
-- <uncounted> (the caller counts them). Returns how many went to the spill
-- and, in the in-link order, the position of the first put at the end.
local function push_many(base, domain, prio, entries, front, now, uncounted)
  local k = #entries
  local q, z, s = tier_keys(base, domain, prio)
  local spilled, first = 0, nil
  if defaults(base).within == 'inlinks' then
    local dkey = base .. ':dom:' .. domain
    local adf, ppf, fpf = position_fields(base, prio)
    if front then
      redis.call('HINCRBY', dkey, fpf, k)
    else
      local st = redis.call('HMGET', dkey, adf, ppf, fpf)
      local ad = tonumber(st[1] or '')
      if ad == nil then  -- the first of this generation: what is queued already comes first
        ad = (tonumber(st[2] or '0') or 0) + fifo_length(base, domain, prio) - (tonumber(st[3] or '0') or 0)
      end
      first = ad + 1
      redis.call('HSET', dkey, adf, ad + k)
    end
  end
  if front then
    for i = k, 1, -1 do redis.call('LPUSH', q, entries[i]) end
  else
    local d = defaults(base)
    local room = k
    if redis.call('EXISTS', z, s) > 0 then
      room = 0
    elseif d.head > 0 then
      room = math.max(0, math.min(k, d.head - redis.call('LLEN', q)))
    end
    for i = 1, room, 500 do redis.call('RPUSH', q, unpack(entries, i, math.min(i + 499, room))) end
    if room < k then
      local len = 0
      for i = room + 1, k, 500 do len = redis.call('RPUSH', s, unpack(entries, i, math.min(i + 499, k))) end
      spilled = k - room
      redis.call('HINCRBY', base .. ':stats', 'spill', spilled)
      -- a block's worth: a job (once, as the spill passes it; tier_done keeps it while needed)
      if len >= d.block and len - spilled < d.block then tier_job(base, 'p', domain, prio, now) end
    end
  end
  queued_more(base, domain, prio, k, now, uncounted)
  return spilled, first
end

local function push(base, domain, prio, entry, front, now)
  return push_many(base, domain, prio, {entry}, front, now)
end

-- A request of <domain> at <prio> that many links lead to, at position
-- <seq> of its queue, is served before its turn (the in-link order: a
-- worker counted the links, crawler/worker/_inlinks.py): a copy of it goes
-- to pq:<d>:<p>, served before the queue at that priority, and <seq> to the
-- skip set sp:<d>:<p>, so the queued copy is dropped when it comes up
-- (counted 'superseded'; the copy 'promoted': the ledger adds up whichever
-- is fetched). Refused: 'late' when the queue is past <seq> (served already:
-- never fetched twice), 'again' when promoted already, 'full' when
-- PROMOTED_MAX wait, 'unknown' past the positions given (another
-- generation's), 'off' outside the in-link order, 'excluded'. Returns the
-- outcome and the requests taken off the queue's front so far.
local PROMOTED_MAX = 64
local function promote(base, domain, prio, entry, seq, now)
  local d = defaults(base)
  if d.within ~= 'inlinks' then return 'off', 0 end
  if has(base .. ':excluded') and redis.call('SISMEMBER', base .. ':excluded', domain) == 1 then
    return 'excluded', 0
  end
  local dkey = base .. ':dom:' .. domain
  local adf, ppf = position_fields(base, prio)
  local st = redis.call('HMGET', dkey, adf, ppf, 'sk')
  local pp = tonumber(st[2] or '0') or 0
  if seq <= pp then return 'late', pp end
  if seq > (tonumber(st[1] or '0') or 0) then return 'unknown', pp end
  local sp = base .. ':sp:' .. domain .. ':' .. prio
  if redis.call('ZSCORE', sp, seq) then return 'again', pp end
  if (tonumber(st[3] or '0') or 0) >= PROMOTED_MAX then return 'full', pp end
  redis.call('ZADD', sp, seq, seq)
  redis.call('HINCRBY', dkey, 'sk', 1)
  redis.call('RPUSH', base .. ':pq:' .. domain .. ':' .. prio, entry)
  redis.call('HINCRBY', dkey, 'pq', 1)
  queued_more(base, domain, prio, 1, now)
  return 'promoted', pp
end

-- The head of <domain> at <prio> after a pop left it holding <left>: below
-- half of meta 'head' (or empty, whatever 'head' is now), it is topped up,
-- from the first block (a job for a worker: 'f') or, with no block, from the
-- spill's front at once. Returns whether the head waits for a worker (it is
-- empty and a block is next), and whether a fill job was made now.
local function tier_refill(base, domain, prio, left, now)
  if not head_low(base, left) then return false end
  local d = defaults(base)
  local q, z, s = tier_keys(base, domain, prio)
  local past = redis.call('EXISTS', z, s)  -- most heads have nothing past them: one call
  if past == 0 then return false end
  if past == 2 or redis.call('EXISTS', z) == 1 then
    return left == 0, tier_job(base, 'f', domain, prio, now)
  end
  local moved = redis.call('LPOP', s, math.max(d.head - left, 1))
  if not moved then return false end
  redis.call('RPUSH', q, unpack(moved))
  redis.call('HINCRBY', base .. ':dom:' .. domain, 'so:' .. prio, #moved)
  local stats = base .. ':stats'
  redis.call('HINCRBY', stats, 'spill', -#moved)
  redis.call('HINCRBY', stats, 'tier_moved', #moved)
  return false
end

-- Every list of <domain>'s queue deleted (an excluded domain's), the spills
-- and blocks taken off :stats (the caller counts the records: dom 'n').
local function tier_drop(base, domain)
  local stats = base .. ':stats'
  local dkey = base .. ':dom:' .. domain
  for _, prio in ipairs(redis.call('ZRANGE', base .. ':qp:' .. domain, 0, -1)) do
    local q, z, s = tier_keys(base, domain, prio)
    local spilled = redis.call('LLEN', s)
    if spilled > 0 then redis.call('HINCRBY', stats, 'spill', -spilled) end
    for _, block in ipairs(redis.call('LRANGE', z, 0, -1)) do
      redis.call('HINCRBY', stats, 'compact', -block_count(block))
      redis.call('HINCRBY', stats, 'compact_bytes', -#block)
    end
    redis.call('DEL', q, z, s, base .. ':pq:' .. domain .. ':' .. prio, base .. ':sp:' .. domain .. ':' .. prio)
    redis.call('HDEL', dkey, 'so:' .. prio, 'zo:' .. prio)
    -- the in-link order's positions: every one given is gone (none to skip, none to promote)
    local adf, ppf, fpf = position_fields(base, prio)
    local ad = redis.call('HGET', dkey, adf)
    if ad then redis.call('HSET', dkey, ppf, ad) end
    redis.call('HDEL', dkey, fpf)
  end
  redis.call('HDEL', dkey, 'pq', 'sk')
  redis.call('DEL', base .. ':qp:' .. domain)
end

-- rate (per s), burst, delay (ms) of a domain: the defaults, overridden by
-- base:policy (operators, live) else base:policy:settings (JSON), the delay
-- raised by a robots.txt Crawl-delay (base:policy:robots, seconds)
local function policy(base, domain, d_rate, d_burst, d_delay)
  local rate, burst, delay = d_rate, d_burst, d_delay
  local raw = has(base .. ':policy') and redis.call('HGET', base .. ':policy', domain)
  if not raw and has(base .. ':policy:settings') then raw = redis.call('HGET', base .. ':policy:settings', domain) end
  if raw then
    local ok, p = pcall(cjson.decode, raw)
    if ok and type(p) == 'table' then
      if type(p.rate) == 'number' then rate = p.rate end
      if type(p.burst) == 'number' then burst = p.burst end
      if type(p.delay) == 'number' then delay = p.delay * 1000 end
    end
  end
  local robots = has(base .. ':policy:robots') and tonumber(redis.call('HGET', base .. ':policy:robots', domain) or '')
  if robots and robots * 1000 > delay then delay = robots * 1000 end
  return rate, math.max(burst, 1), delay
end

-- The due time (ms) of a domain's first revisit, the head of due:<d>; nil
-- when it has none, or recrawl is off (its tracked URLs are not served then).
local function due_head(base, domain)
  if defaults(base).recrawl == 'off' then return nil end
  local head = redis.call('ZRANGE', base .. ':due:' .. domain, 0, 0, 'WITHSCORES')
  if #head == 0 then return nil end
  return tonumber(head[2])
end

-- A domain's place in base:ready (design/recrawl.md E): the earlier of
-- <turn>, its queued requests' turn (nil: none queued), and its first
-- revisit's due time, never before <floor> (its 'next'); nil: neither kind
-- waits, it is not ready. The caller knows it is not parked.
local function ready_score(base, domain, turn, floor)
  local due = due_head(base, domain)
  if due then
    due = math.max(due, floor)
    if turn == nil or due < turn then return due end
  end
  return turn
end

-- The request of lease <id> to a parked domain is done: the domain may be
-- fetched again <delay> after <mark> (ms, server clock), the delay being
-- stretched to delay_factor x the fetch's duration <dur> (ms) when that is
-- longer, up to delay_max. A later 'next' (a push-back) still wins.
local function unpark(base, domain, id, mark, dur)
  local dkey = base .. ':dom:' .. domain
  local st = redis.call('HMGET', dkey, 'busy', 'next', 'n')
  if st[1] ~= id then return end
  local d = defaults(base)
  local _, _, delay = policy(base, domain, d.rate, d.burst, d.delay)
  if d.factor > 0 and dur and dur > 0 then
    local stretched = d.factor * dur
    if d.max > 0 then stretched = math.min(stretched, d.max) end
    if stretched > delay then
      delay = stretched
      redis.call('HINCRBY', base .. ':stats', 'delays_stretched', 1)
    end
  end
  local nxt = math.max(tonumber(st[2] or '0') or 0, mark + delay)
  redis.call('HDEL', dkey, 'busy')
  redis.call('HSET', dkey, 'next', nxt)
  local score = ready_score(base, domain, (tonumber(st[3] or '0') or 0) > 0 and nxt or nil, nxt)
  if score then redis.call('ZADD', base .. ':ready', score, domain) end
end

-- A domain with tracked URLs (CRAWLER_RECRAWL; design/recrawl.md E) is
-- ready at the earlier of its queued requests' turn and its first revisit's
-- due time (due:<d>'s head), never before its 'next' and not while parked
-- (the acknowledgement that unparks it looks again). Keeps base:rdue (domain
-- -> its first due ms) in step with that head. With recrawl off its revisits
-- make no domain ready (base:rdue is kept all the same).
local function revisit_ready(base, domain, now)
  local head = redis.call('ZRANGE', base .. ':due:' .. domain, 0, 0, 'WITHSCORES')
  if #head == 0 then
    redis.call('ZREM', base .. ':rdue', domain)
    return
  end
  local due = tonumber(head[2])
  redis.call('ZADD', base .. ':rdue', due, domain)
  if defaults(base).recrawl == 'off' then return end
  local st = redis.call('HMGET', base .. ':dom:' .. domain, 'busy', 'next')
  if st[1] then return end
  redis.call('ZADD', base .. ':ready', 'LT', math.max(due, tonumber(st[2] or '0') or 0), domain)
end

-- Per-address politeness (CRAWLER_IP_DELAY; the keys: crawler/store/keys.py;
-- its settings: defaults() above). IPB, the address space: KEYS[2] when the
-- caller gives it (on a standalone Redis one per spider, shared by all its
-- shards), else the frontier's base (Redis Cluster: one per shard).
local IPB = KEYS[2] or KEYS[1]

-- A domain of frontier <sbase> (this one, or another shard's in the same
-- address space) goes back into its ready set, if it has requests or tracked
-- URLs (ready_score) and is not parked; returns whether it went back.
local function ready_again(sbase, domain, now)
  local st = redis.call('HMGET', sbase .. ':dom:' .. domain, 'n', 'busy', 'next')
  if st[2] then return false end
  local floor = math.max(now, tonumber(st[3] or '0') or 0)
  local score = ready_score(sbase, domain, (tonumber(st[1] or '0') or 0) > 0 and floor or nil, floor)
  if score == nil then return false end
  redis.call('ZADD', sbase .. ':ready', score, domain)
  return true
end

-- A head that waited for its block (dom:<d> 'tw', dequeue.lua's starved())
-- waits no more: its domain goes back into its ready set.
local function tier_unwait(base, domain, now)
  if redis.call('HDEL', base .. ':dom:' .. domain, 'tw') == 1 then ready_again(base, domain, now) end
end

-- The request of lease <id> is done or given up: if it was charged to an
-- address, one fewer is in flight there, and the address's next request
-- may start ip_delay after <mark> (a shared front end spaces its requests'
-- starts instead, when they start); its first waiter is offered it then.
-- ip_charged(): the address <id> was charged to, and its charge taken off
-- base:leasea; ip_free(): the address's side.
local function ip_charged(base, id)
  if not has(base .. ':leasea') then return nil end
  local a = redis.call('HGET', base .. ':leasea', id)
  if a then redis.call('HDEL', base .. ':leasea', id) end
  return a
end

local function ip_free(base, a, mark)
  local k = IPB .. ':ip:' .. a
  local v = redis.call('HMGET', k, 'out', 'next', 'shared')
  local out = math.max(0, (tonumber(v[1] or '0') or 0) - 1)
  local nxt = tonumber(v[2] or '0') or 0
  if v[3] ~= '1' then nxt = math.max(nxt, mark + defaults(base).ip_delay) end
  redis.call('HSET', k, 'out', out, 'next', nxt)
  if redis.call('EXISTS', IPB .. ':ipwait:' .. a) == 1 then redis.call('ZADD', IPB .. ':ipdue', nxt, a) end
end

local function ip_release(base, id, mark)
  local a = ip_charged(base, id)
  if a then ip_free(base, a, mark) end
end

-- The lookup of <host> is over (answered, or its claim ran out): the domains
-- that waited on it are ready again.
local function name_done(base, host, now)
  local w = base .. ':dnswait:' .. host
  for _, d in ipairs(redis.call('SMEMBERS', w)) do ready_again(base, d, now) end
  redis.call('DEL', w)
  redis.call('ZREM', base .. ':dnsq', host)
end

local function push_record(base, rec, front, now)
  local domain, prio, entry = split_record(rec)
  push(base, domain, prio, entry, front, now)
end

-- the index at which the record of revisit entry <entry> ("V<k>:<trust>:<mu>:<record>")
-- starts, and its k; nil when it is not laid out so
local function revisit_parts(entry)
  local a = string.find(entry, ':', 2, true)
  local b = a and string.find(entry, ':', a + 1, true)
  local c = b and string.find(entry, ':', b + 1, true)
  if not c then return nil end
  return c + 1, string.sub(entry, 2, a - 1)
end

-- Lease <id> is given up (its worker handed it back: release.lua; or it
-- expired: dequeue.lua, <expired> true): its request goes back to the front
-- of its queue, its parked domain's delay runs from <now> (it may have been
-- sent), and its address charge, if any, is released. A revisit (a "V"
-- entry, design/recrawl.md E) that expired does not go back to a queue: its
-- request may have reached the server, so it waits in due:<d> at the time
-- it was re-armed to when leased (MIN after its lease ran out), and its
-- admission is undone (stats revisits -1, rv_expired +1); one its worker
-- handed back unsent goes to the front of its queue as its V entry, counted
-- queued, keeping its admission, and its due time goes to now + rv_max (it is
-- re-armed when leased from the queue: dequeue.lua), so it is not served
-- twice. A lease no longer held (acknowledged, or
-- given up already) is left alone. A held lease whose record is missing
-- still frees its address: a charge kept would hold the address busy for
-- good. Returns whether a request went back to a queue.
local function requeue_lease(base, id, now, expired)
  if redis.call('ZREM', base .. ':leases', id) == 0 then return false end
  local rec = redis.call('HGET', base .. ':lease', id)
  local back = false
  if rec then
    redis.call('HDEL', base .. ':lease', id)
    local domain, prio, entry = split_record(rec)
    unpark(base, domain, id, now, nil)
    if expired and string.sub(entry, 1, 1) == 'V' then
      redis.call('HINCRBY', base .. ':stats', 'revisits', -1)
      redis.call('HINCRBY', base .. ':stats', 'rv_expired', 1)
    else
      push(base, domain, prio, entry, true, now)
      back = true
      local k = string.sub(entry, 1, 1) == 'V' and select(2, revisit_parts(entry))
      if k then
        -- queued now, it is leased from its queue (and re-armed then): its due
        -- time goes to the latest a tracked URL may wait, so that it is not
        -- also served from due:<d> while it waits in the queue
        local d = defaults(base)
        redis.call('ZADD', base .. ':due:' .. domain, 'XX', now + math.max(d.rv_max, d.rv_min), k)
        revisit_ready(base, domain, now)
      end
    end
  end
  ip_release(base, id, now)
  return back
end

-- Acknowledgements: "<id>" or "<id>:<age>:<dur>[:<end>]", age = ms since the
-- request's politeness mark (its response began or ended, as the worker's
-- CRAWLER_DELAY_FROM says), dur = ms the fetch took (either may be empty),
-- end = how the request ended (ENDS below; absent: it moved on, as a retry
-- waiting in the delayed set). The mark is placed on this server's clock, 1 ms
-- late rather than early. ``now``: the caller's reading of that clock, if it
-- took one (else read here, when first needed). Only a lease still held
-- counts: an acknowledgement sent twice, or after its lease expired, is void.
local ENDS = {s = 'end_stored', n = 'end_not_modified', d = 'end_dead', r = 'end_disallowed', k = 'end_skipped',
              x = 'end_redirected', l = 'end_lost', u = 'end_unknown'}

local function ack_all(base, ids, now)
  if #ids == 0 then return 0 end
  local parsed, names = {}, {}
  for i, ack in ipairs(ids) do
    local id, age, dur, fin = ack, nil, nil, nil
    local c = string.find(ack, ':', 1, true)
    if c then
      id = string.sub(ack, 1, c - 1)
      local c2 = string.find(ack, ':', c + 1, true)
      age = tonumber(string.sub(ack, c + 1, (c2 or 0) - 1))
      if c2 then
        local c3 = string.find(ack, ':', c2 + 1, true)
        dur = tonumber(string.sub(ack, c2 + 1, (c3 or 0) - 1))
        if c3 then fin = ENDS[string.sub(ack, c3 + 1)] end
      end
    end
    parsed[i] = {age, dur, fin}
    names[i] = id
  end
  -- the leases still held (an id named twice counts once), read and taken off in one call per key
  local deadlines = call_each('ZMSCORE', base .. ':leases', names)
  local held, gone, places = {}, {}, {}
  for i, id in ipairs(names) do
    if deadlines[i] and not held[id] then
      held[id] = true
      gone[#gone + 1] = id
      places[#places + 1] = i
    end
  end
  if #gone == 0 then return 0 end
  local recs = call_each('HMGET', base .. ':lease', gone)
  call_each('ZREM', base .. ':leases', gone)
  call_each('HDEL', base .. ':lease', gone)
  local charged = {}
  if has(base .. ':leasea') then
    charged = call_each('HMGET', base .. ':leasea', gone)
    call_each('HDEL', base .. ':leasea', gone)
  end
  local ends = {}
  if now == nil then now = now_ms() end
  for j, id in ipairs(gone) do
    local p = parsed[places[j]]  -- indexed, not unpack(): a table of holes has no length
    local age, dur, fin = p[1], p[2], p[3]
    if fin then ends[fin] = (ends[fin] or 0) + 1 end
    local mark = now + 1 - (age or 0)
    if recs[j] then unpark(base, split_record(recs[j]), id, mark, dur) end
    if charged[j] then ip_free(base, charged[j], mark) end
  end
  local stats = base .. ':stats'
  redis.call('HINCRBY', stats, 'acked', #gone)
  for name, n in pairs(ends) do redis.call('HINCRBY', stats, name, n) end
  return #gone
end

-- ARGV[start] = count, followed by that many values; returns values, next index
local function read_list(start)
  local n = tonumber(ARGV[start])
  local out = {}
  for i = 1, n do out[i] = ARGV[start + i] end
  return out, start + n + 1
end

-- A new Bloom filter <idx> for <cap> URLs at error rate <p>, allocated at its
-- exact size at once (SETBIT would grow the string greedily, up to twice).
local function bloom_new_filter(base, idx, cap, p)
  local meta = base .. ':bloom'
  local m = math.ceil(cap * -math.log(p) / (math.log(2) ^ 2))
  m = math.ceil(m / 8) * 8
  local k = math.max(1, math.floor(m / cap * math.log(2) + 0.5))
  redis.call('SET', meta .. ':' .. idx, string.rep('\0', m / 8))
  redis.call('HSET', meta, 'm' .. idx, m, 'k' .. idx, k, 'cap' .. idx, cap, 'n' .. idx, 0,
             'p' .. idx, p, 'count', idx + 1)
  return {m = m, k = k, cap = cap, n = 0, p = p, key = meta .. ':' .. idx}
end

-- Offering requests to the frontier: per-domain exclusion and budget, then
-- dedup (exact or Bloom), then the push (to the head, or past it to the
-- spill: push()). Shared by enqueue and drain_inbox.
-- new_offer(...).one(a, b, domain, prio, entry, filter, place) per request
-- (true when the request is marked seen now: added or a duplicate), then
-- .finish() -> {added, duplicates, spilled, over_budget, excluded, seqs}:
-- seqs, in the in-link order, {place, position, ...} of the requests added
-- that were given a <place> (push_many()).
local function new_offer(base, mode, budget)
  local now = now_ms()
  local bloom = nil
  local counts, totals = {}, {}
  local added, dups, spilled, over, excluded = 0, 0, 0, 0, 0
  local excluded_set = {}
  -- what is added is pushed at finish(), one push per domain and priority, in order
  local groups, order, admitted, last_group = {}, {}, {}, nil

  local function bloom_load()
    local meta = base .. ':bloom'
    local count = tonumber(redis.call('HGET', meta, 'count') or '0')
    local filters = {}
    for f = 0, count - 1 do
      local v = redis.call('HMGET', meta, 'm' .. f, 'k' .. f, 'cap' .. f, 'n' .. f, 'p' .. f)
      filters[#filters + 1] = {m = tonumber(v[1]), k = tonumber(v[2]), cap = tonumber(v[3]),
                               n = tonumber(v[4]), p = tonumber(v[5]), key = meta .. ':' .. f}
    end
    return filters
  end

  local function bloom_test_add(h1, h2)
    if bloom == nil then bloom = bloom_load() end
    for _, f in ipairs(bloom) do
      local all = true
      for j = 0, f.k - 1 do
        if redis.call('GETBIT', f.key, (h1 + j * h2) % f.m) == 0 then all = false; break end
      end
      if all then return false end
    end
    local f = bloom[#bloom]
    for j = 0, f.k - 1 do redis.call('SETBIT', f.key, (h1 + j * h2) % f.m, 1) end
    f.n = f.n + 1
    redis.call('HINCRBY', base .. ':bloom', 'n' .. (#bloom - 1), 1)
    if f.n >= f.cap then
      -- full: a new filter twice as large at a tenth of the error rate; the
      -- first holds 0.9 of the configured rate, so the sum of all stays below it
      bloom[#bloom + 1] = bloom_new_filter(base, #bloom, f.cap * 2, f.p / 10)
    end
    return true
  end

  -- a domain's budget: <budget> URLs admitted, or with meta 'budget_max'
  -- above it (a budget by rank), <budget> x (1 + its weight), at most
  -- budget_max; read once a call per domain past <budget>. A domain found at
  -- its budget is counted once in :stats 'budgets_spent' (dom:<d> 'spent').
  local budget_max, limits, spent = nil, {}, {}
  local function budget_of(domain)
    local limit = limits[domain]
    if limit ~= nil then return limit end
    if budget_max == nil then
      budget_max = tonumber(redis.call('HGET', base .. ':meta', 'budget_max') or '') or 0
    end
    local dkey = base .. ':dom:' .. domain
    limit = budget
    if budget_max > budget then
      local st = redis.call('HMGET', dkey, 'w', 'wt')
      limit = math.min(budget_max, math.floor(budget * (1 + domain_weight(base, domain, dkey, st[1], st[2], now))))
    end
    limits[domain] = limit
    return limit
  end

  local self = {}
  function self.one(a, b, domain, prio, entry, filter, place)
    local seen = false
    local ex = excluded_set[domain]
    if ex == nil then
      ex = has(base .. ':excluded') and redis.call('SISMEMBER', base .. ':excluded', domain) == 1
      excluded_set[domain] = ex
    end
    if ex then excluded = excluded + 1; return false end
    local n = counts[domain]
    if n == nil then
      local st = redis.call('HMGET', base .. ':dom:' .. domain, 'n', 'admitted')
      n = tonumber(st[1] or '0') or 0
      totals[domain] = tonumber(st[2] or '0') or 0
    end
    -- over-budget URLs are not marked seen: offered again once the budget
    -- is raised (or the domain's weight raised it), they are taken
    if budget > 0 and totals[domain] >= budget and totals[domain] >= budget_of(domain) then
      over = over + 1
      if not spent[domain] then
        spent[domain] = true
        if redis.call('HSETNX', base .. ':dom:' .. domain, 'spent', 1) == 1 then
          redis.call('HINCRBY', base .. ':stats', 'budgets_spent', 1)
        end
      end
    else
      local new = true
      if filter == '1' then
        if mode == 'exact' then
          new = redis.call('SADD', base .. ':seen:' .. a, b) == 1
          seen = true
        elseif mode == 'bloom' then
          new = bloom_test_add(tonumber(a), tonumber(b))
          seen = true
        end
      end
      if new then
        local g = last_group  -- most requests come in runs of one domain and priority
        if not g or g.domain ~= domain or g.prio ~= prio then
          local key = domain .. '\n' .. prio
          g = groups[key]
          if not g then
            g = {domain = domain, prio = prio, entries = {}, places = {}}
            groups[key] = g
            order[#order + 1] = g
          end
          last_group = g
        end
        g.entries[#g.entries + 1] = entry
        g.places[#g.entries] = place
        admitted[domain] = (admitted[domain] or 0) + 1
        n = n + 1
        totals[domain] = totals[domain] + 1
        added = added + 1
      else
        dups = dups + 1
      end
    end
    counts[domain] = n
    return seen
  end

  function self.finish()
    local seqs = {}
    for _, g in ipairs(order) do
      local past, first = push_many(base, g.domain, g.prio, g.entries, false, now, true)
      spilled = spilled + past
      if first then
        for i = 1, #g.entries do
          if g.places[i] then seqs[#seqs + 1] = g.places[i]; seqs[#seqs + 1] = first + i - 1 end
        end
      end
    end
    for domain, k in pairs(admitted) do redis.call('HINCRBY', base .. ':dom:' .. domain, 'admitted', k) end
    local stats = base .. ':stats'
    if added > 0 then
      redis.call('HINCRBY', stats, 'enqueued', added)
      redis.call('HINCRBY', stats, 'queued', added)
    end
    if dups > 0 then redis.call('HINCRBY', stats, 'duplicates', dups) end
    if spilled > 0 then redis.call('HINCRBY', stats, 'spilled', spilled) end
    if over > 0 then redis.call('HINCRBY', stats, 'over_budget', over) end
    if excluded > 0 then redis.call('HINCRBY', stats, 'excluded', excluded) end
    return {added, dups, spilled, over, excluded, seqs}
  end
  return self
end
