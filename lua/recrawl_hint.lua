#!lua
-- flagged: when Redis is out of memory it refuses the whole call up front
-- (hints are advice: the worker counts them lost), never half of it.
-- recrawl_hint: sitemap <lastmod>s of URLs the frontier may track
-- (CRAWLER_RECRAWL; design/recrawl.md C.5). A host earns its hints: its
-- rhost:<host> counts lastmod_ok (a hinted visit found the page changed) and
-- lastmod_bad (it found it unchanged), written by _recrawl.lua's
-- history_write at the hinted visit.
--   trusted  (lastmod_ok >= 3 and ok >= 80 % of ok + bad): every hint applied
--   unproven (otherwise, while bad < 3 or bad <= ok): 1 hint in 4 applied
--            (rhost:<host> hints counts them), to gather the evidence
--   wrong    (bad >= 3, and bad > ok): 1 hint in 32, so that a host that
--            fixes its sitemaps is noticed
-- A hint applies to a tracked URL (hist:<d> holds k), waiting in due:<d>
-- at the time its last write set (not leased: a leased revisit is re-armed
-- later, and a hint must not serve it twice), whose lastmod is after its last visit, and not hinted
-- already: its due time becomes max(now, last visit + rv_min) when that is
-- sooner, and its record's flag 0x08 (hinted) is set. It never brings a
-- visit sooner than CRAWLER_RECRAWL_MIN after the last one.
-- KEYS[1]  base key of the frontier
-- ARGV     4 values per hint: domain, k (the URL's key), lastmod (Unix s), host
-- Returns {applied, ignored (untrusted host), untracked (no record, or leased now),
--          stale (lastmod not after the last visit, hinted already, or due
--          sooner anyway)}
local base = KEYS[1]
local now = now_ms()
local d = defaults(base)
local applied, ignored, untracked, stale = 0, 0, 0, 0
local touched = {}
local trust = {}  -- host -> 'trusted' | 'unproven' | 'wrong', read once a call

local function lastmod_trust(host)
  if trust[host] == nil then
    local v = redis.call('HMGET', base .. ':rhost:' .. host, 'lastmod_ok', 'lastmod_bad')
    local ok, bad = tonumber(v[1] or '0') or 0, tonumber(v[2] or '0') or 0
    if ok >= 3 and ok >= 0.8 * (ok + bad) then
      trust[host] = 'trusted'
    elseif bad >= 3 and bad > ok then
      trust[host] = 'wrong'
    else
      trust[host] = 'unproven'
    end
  end
  return trust[host]
end

local function sampled(host, every)
  return redis.call('HINCRBY', base .. ':rhost:' .. host, 'hints', 1) % every == 1
end

if #ARGV % 4 ~= 0 then error('recrawl_hint: ' .. #ARGV .. ' values, not 4 per hint') end
for i = 1, #ARGV, 4 do
  local domain, k, lastmod, host = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  if lastmod == nil or domain == '' or k == '' then error('recrawl_hint: hint ' .. ((i + 3) / 4)) end
  local hist, due = base .. ':hist:' .. domain, base .. ':due:' .. domain
  local record = redis.call('HGET', hist, k)
  local score = record and redis.call('ZSCORE', due, k)
  if not score then
    untracked = untracked + 1
  else
    local flags = string.byte(record, 1)
    local last, iv = struct.unpack('>I4I4', record, 2)
    -- the due time its last write set is last + iv (within rv_min, rv_max; 'last' is
    -- stamped in s, the time in ms); a leased revisit is re-armed later than that
    -- (dequeue.lua: lease + rv_min after it was served)
    local written = last * 1000 + recrawl.due_in(iv, d)
    if tonumber(score) >= written + 1000 then
      untracked = untracked + 1
    elseif lastmod <= last or bit.band(flags, recrawl.HINTED) ~= 0 then
      stale = stale + 1
    else
      local level = lastmod_trust(host)
      if level == 'trusted' or (level == 'unproven' and sampled(host, 4)) or (level == 'wrong' and sampled(host, 32)) then
        local at = math.max(now, last * 1000 + d.rv_min)
        if at < tonumber(score) then
          redis.call('ZADD', due, at, k)
          redis.call('HSET', hist, k, string.char(bit.bor(flags, recrawl.HINTED)) .. string.sub(record, 2))
          touched[domain] = true
          applied = applied + 1
        else
          stale = stale + 1  -- due sooner anyway
        end
      else
        ignored = ignored + 1
      end
    end
  end
end
local stats = base .. ':stats'
if applied > 0 then redis.call('HINCRBY', stats, 'rv_hints_applied', applied) end
if ignored > 0 then redis.call('HINCRBY', stats, 'rv_hints_ignored', ignored) end
for domain in pairs(touched) do revisit_ready(base, domain, now) end
return {applied, ignored, untracked, stale}
