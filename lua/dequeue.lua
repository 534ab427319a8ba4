#!lua flags=allow-oom
-- allow-oom: it frees at least what it stores, so it keeps the crawl going when
-- Redis is out of memory (maxmemory with noeviction).
-- dequeue: lease up to N requests of due domains, within each domain's token
-- bucket and minimum delay, on the server's clock. Also acknowledges leases,
-- returns expired leases to their queues and releases due delayed requests.
-- KEYS[1]  base key of the frontier
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
-- Overrides per domain: JSON {"rate": r, "burst": b, "delay": seconds} in
-- base:policy (operators, live) else base:policy:settings; a robots.txt
-- Crawl-delay in base:policy:robots (seconds) raises the delay.
-- A domain with a delay gives one request at a time and is parked (out of
-- base:ready, dom 'busy' = the lease) until that request is acknowledged:
-- the delay runs from the request's mark, not from this dequeue.
-- Returns {now_ms, next_due_ms or -1 (the earliest score of base:ready and
--          base:delayed), epoch id ("" if none), seq, queued,
--          lease id, record, lease id, record, ...}
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
-- the reply's epoch fields: the epoch id (read once: a script is atomic),
-- the lease id counter and the requests queued, as this call leaves them
local epoch_id = nil
local function epoch(out)
  epoch_id = epoch_id or redis.call('HGET', base .. ':epoch', 'id') or ''
  out[3] = epoch_id
  out[4] = tonumber(redis.call('GET', base .. ':seq') or '0')
  out[5] = tonumber(redis.call('HGET', stats, 'queued') or '0') or 0
  return out
end
local expect = ARGV[at] or ''
if expect ~= '' then
  epoch_id = redis.call('HGET', base .. ':epoch', 'id') or ''
  local seq = tonumber(redis.call('GET', base .. ':seq') or '0')
  if epoch_id ~= expect or seq < (tonumber(ARGV[at + 1]) or 0) then return epoch({now, -1}) end
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

local out = {now, -1, '', 0, 0}
local taken, attempts, denials = 0, 0, 0

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
  if rate > 0 then
    local ts = tonumber(st[3] or '') or now
    tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
  end
  local took = 0
  while taken < want and n > 0 do
    if rate > 0 and tokens < 1 then break end
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
    if delay > 0 then
      redis.call('HSET', dkey, 'busy', id)  -- parked until this lease is acknowledged
      break
    end
  end
  if took == 0 and n > 0 then denials = denials + 1 end
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
local later = redis.call('ZRANGE', base .. ':delayed', 0, 0, 'WITHSCORES')
if #later > 0 and (out[2] < 0 or tonumber(later[2]) < out[2]) then out[2] = tonumber(later[2]) end
if call ~= '' and taken > 0 then redis.call('SET', replay_key, cmsgpack.pack(out), 'PX', 120000) end
return epoch(out)
