-- enqueue: dedup, cap and push a batch of requests in one call; ack leases.
-- KEYS[1]  base key of the frontier
-- ARGV[1]  dedup mode: "exact" | "bloom" | "none"
-- ARGV[2]  per-domain cap on queued requests (0: no cap)
-- ARGV[3]  number of lease ids to acknowledge, then the ids
-- then per request, 6 values: a, b, domain, priority, entry, filter ("1" dedup, "0" dont_filter)
--   exact: a = bucket, b = 64-bit digest slice as a decimal integer
--   bloom: a, b = two 32-bit hashes of the digest (double hashing)
-- Returns {added, duplicates, capped, acked}
local base = KEYS[1]
local mode = ARGV[1]
local cap = tonumber(ARGV[2])
local acks, i = read_list(3)
local acked = ack_all(base, acks)
local now = now_ms()

local bloom = nil
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
  local meta = base .. ':bloom'
  redis.call('HINCRBY', meta, 'n' .. (#bloom - 1), 1)
  if f.n >= f.cap then
    -- full: a new filter twice as large at a tenth of the error rate; the
    -- first holds 0.9 of the configured rate, so the sum of all stays below it
    bloom[#bloom + 1] = bloom_new_filter(base, #bloom, f.cap * 2, f.p / 10)
  end
  return true
end

local added, dups, capped = 0, 0, 0
local counts = {}
while i + 5 <= #ARGV do
  local a, b, domain, prio, entry, filter = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  i = i + 6
  local n = counts[domain]
  if n == nil then n = tonumber(redis.call('HGET', base .. ':dom:' .. domain, 'n') or '0') end
  if cap > 0 and n >= cap then
    capped = capped + 1  -- not marked seen: it can be offered again once there is room
  else
    local new = true
    if filter == '1' then
      if mode == 'exact' then
        new = redis.call('SADD', base .. ':seen:' .. a, b) == 1
      elseif mode == 'bloom' then
        new = bloom_test_add(tonumber(a), tonumber(b))
      end
    end
    if new then
      push(base, domain, prio, entry, false, now)
      n = n + 1
      added = added + 1
    else
      dups = dups + 1
    end
  end
  counts[domain] = n
end
local stats = base .. ':stats'
if added > 0 then redis.call('HINCRBY', stats, 'enqueued', added) end
if dups > 0 then redis.call('HINCRBY', stats, 'duplicates', dups) end
if capped > 0 then redis.call('HINCRBY', stats, 'capped', capped) end
return {added, dups, capped, acked}
