#!lua flags=allow-oom
-- allow-oom: a pack frees more than it stores (requests out of a spill,
-- the same compressed into a block), and a fill stores one block's requests
-- in a head whose pops free them: refused, the domain would wait for good
-- on a Redis out of memory, which the crawl's pops are draining.
-- tier_done: the replies of claimed compact-tier jobs (tier_take.lua),
-- each applied only if the list it worked on is as the job saw it (dom:<d>
-- so:<p> / zo:<p> unchanged): a spill's first records replaced by their
-- blocks at the end of z:<d>:<p>; a head given its first block's records,
-- at its end, and its domain readied if its head waited for them. A job
-- with more to do stays, due now; else it is dropped. A stale reply (the
-- list moved meanwhile) changes nothing and its job is due again.
-- KEYS[1]  base key of the frontier
-- ARGV     per job: kind ('p' | 'f'), domain, priority, count, n, then n values:
--          'p': blocks, "<records>\n<compressed>", packed from the spill's
--               first records in their order;
--          'f': the records of the first block, in their order
-- Returns {applied, stale, refused}: refused counts fill replies whose
--   records do not number what their block says (the block is left as it was)
local base = KEYS[1]
local now = now_ms()
local d = defaults(base)
local stats = base .. ':stats'
local applied, stale, refused = 0, 0, 0
local i = 1
while i + 4 <= #ARGV do
  local kind, domain, prio, count, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4])
  local first, last = i + 5, i + 4 + n
  i = last + 1
  local job = kind .. '\n' .. domain .. '\n' .. prio
  local q, z, s = tier_keys(base, domain, prio)
  local dkey = base .. ':dom:' .. domain
  local field = (kind == 'p' and 'so:' or 'zo:') .. prio
  local more = false
  if (redis.call('HGET', dkey, field) or '0') ~= count then
    stale = stale + 1
    more = true
  elseif kind == 'p' then
    local records, bytes = 0, 0
    for k = first, last do
      records = records + block_count(ARGV[k])
      bytes = bytes + #ARGV[k]
    end
    if records > 0 and records <= redis.call('LLEN', s) then
      redis.call('LTRIM', s, records, -1)
      for k = first, last, 500 do redis.call('RPUSH', z, unpack(ARGV, k, math.min(k + 499, last))) end
      redis.call('HINCRBY', dkey, field, records)
      redis.call('HINCRBY', stats, 'spill', -records)
      redis.call('HINCRBY', stats, 'compact', records)
      redis.call('HINCRBY', stats, 'compact_bytes', bytes)
      redis.call('HINCRBY', stats, 'tier_packed', records)
      applied = applied + 1
    else
      stale = stale + 1
    end
    more = redis.call('LLEN', s) >= d.block
  else
    local block = redis.call('LINDEX', z, 0)
    if block and block_count(block) == n then
      redis.call('LPOP', z)
      for k = first, last, 500 do redis.call('RPUSH', q, unpack(ARGV, k, math.min(k + 499, last))) end
      redis.call('HINCRBY', dkey, field, 1)
      redis.call('HINCRBY', stats, 'compact', -n)
      redis.call('HINCRBY', stats, 'compact_bytes', -#block)
      redis.call('HINCRBY', stats, 'tier_unpacked', n)
      applied = applied + 1
      tier_unwait(base, domain, now)
    elseif block then
      refused = refused + 1
      redis.call('HINCRBY', stats, 'tier_refused', 1)
    end
    more = block ~= nil and head_low(base, redis.call('LLEN', q)) and redis.call('EXISTS', z) == 1
  end
  if more then
    redis.call('ZADD', base .. ':tiers', 'XX', now, job)
  else
    redis.call('ZREM', base .. ':tiers', job)
  end
end
return {applied, stale, refused}
