-- Shared helpers, prepended to every script of this folder by
-- crawler/scheduler/scripts.py. Key layout (base = KEYS[1] = "<prefix>:{<spider>:<shard>}"):
--   base:ready           zset   domain -> ms when it may next be fetched (only domains with queued requests)
--   base:dom:<d>         hash   n (queued), next (ms), tokens, ts (token bucket)
--   base:qp:<d>          zset   priorities queued for <d>, score -priority
--   base:q:<d>:<p>       list   serialized requests of <d> at priority <p>, FIFO
--   base:leases          zset   lease id -> deadline ms;  base:lease hash lease id -> record
--   base:delayed         zset   "<id>\n<record>" -> not-before ms
--   base:seen:<bucket>   set    exact dedup (intset of 64-bit digest slices)
--   base:bloom, base:bloom:<i>   Bloom filter metadata and bit arrays
--   base:policy, base:policy:settings, base:policy:robots   per-domain politeness overrides
--   base:stats           hash   counters;  base:seq  string, id counter
-- A record is "<domain>\n<priority>\n<serialized request>".

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function split_record(rec)
  local i = string.find(rec, '\n', 1, true)
  local j = string.find(rec, '\n', i + 1, true)
  return string.sub(rec, 1, i - 1), string.sub(rec, i + 1, j - 1), string.sub(rec, j + 1)
end

local function push(base, domain, prio, entry, front, now)
  local q = base .. ':q:' .. domain .. ':' .. prio
  if front then redis.call('LPUSH', q, entry) else redis.call('RPUSH', q, entry) end
  redis.call('ZADD', base .. ':qp:' .. domain, -tonumber(prio), prio)
  local dkey = base .. ':dom:' .. domain
  redis.call('HINCRBY', dkey, 'n', 1)
  local nxt = tonumber(redis.call('HGET', dkey, 'next') or '0') or 0
  redis.call('ZADD', base .. ':ready', 'NX', math.max(now, nxt), domain)
  redis.call('HINCRBY', base .. ':stats', 'queued', 1)
end

local function push_record(base, rec, front, now)
  local domain, prio, entry = split_record(rec)
  push(base, domain, prio, entry, front, now)
end

local function ack_all(base, ids)
  local acked = 0
  for _, id in ipairs(ids) do
    if redis.call('ZREM', base .. ':leases', id) == 1 then
      redis.call('HDEL', base .. ':lease', id)
      acked = acked + 1
    end
  end
  if acked > 0 then redis.call('HINCRBY', base .. ':stats', 'acked', acked) end
  return acked
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
