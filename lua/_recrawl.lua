-- The fetch history's writes (CRAWLER_RECRAWL; design/recrawl.md C.1 and E),
-- sent by crawler/store/keys.py after _lib.lua and before every script's
-- body: it calls _lib.lua's defaults() and revisit_ready(). One top-level
-- local only, the table `recrawl` (a chunk has at most 200 locals).
--
-- The keys (under the base; every one on its slot; crawler/store/keys.py):
--   hist:<d>  hash  k -> packed record (crawler/recrawl/record.py)
--   due:<d>   zset  k -> ms next due (server clock)
--   rdom:<d>  hash  n tracked, lb<i> per rate bin, since (writes since mu), rc, mu
--   rdue      zset  domain -> its earliest due ms (due:<d>'s head)
--   rhost:<h> hash  etag, lm, all: ms until which that validator (every
--                   validator) is not sent; lies_etag, lies_lm, lies_lm_now,
--                   ignored: evidence counts; lastmod_ok, lastmod_bad: its
--                   sitemaps' <lastmod> proved right / wrong, hints: the
--                   hints sampled (recrawl_hint.lua)
--
-- A write list, riding right after a script's acknowledgements (enqueue,
-- delay, dequeue): ARGV[start] = count (absent: none), then 11 values per
-- write (crawler/store/records.py HistoryWrite.wire):
--   mode      'c' create, 'u' update, 'd' delete
--   domain, k the registered domain; the URL's key (decimal, 52 bits of its digest)
--   iv        s until the URL is due again (never sooner than meta rv_min,
--             never later than rv_max)
--   rbin_old, rbin_new   the rate bins (0..23) the URL leaves / joins; -1 none
--   outcome   '' first visit, 'c' changed, 'u' unchanged (200), 'n' 304
--   saved     body bytes the visit saved
--   host      the host a lie is evidence against
--   lie       '', 'etag', 'lm', 'lm_now', 'ignored'
--   record    the packed record (c/u: at least the 39 fixed bytes; its
--             'last', bytes 2-5, is stamped here; d: '')
local recrawl = {OUTCOMES = {[''] = false, c = 'rv_changed', u = 'rv_unchanged', n = 'rv_not_modified'},
                LIES = {etag = {'lies_etag', 'etag', 1}, lm = {'lies_lm', 'lm', 1},
                        lm_now = {'lies_lm_now', 'lm', 3}, ignored = {'ignored', 'all', 3}},
                FIXED = 39, HINTED = 0x08}

-- ms from a visit to its next due time for an interval of <iv> s: never
-- sooner than rv_min, never later than rv_max (<d>: defaults()); the one
-- rule history_write schedules by and recrawl_hint.lua recognises
function recrawl.due_in(iv, d)
  return math.min(math.max(iv * 1000, d.rv_min), math.max(d.rv_max, d.rv_min))
end

-- The write list at ARGV[start]: a list of tables, and the index after it.
-- Every write is checked before any is applied: a malformed list fails the
-- whole call before it writes anything (acknowledgements included).
function recrawl.read_writes(start)
  local count = ARGV[start]
  if count == nil then return {}, start + 1 end
  local n = tonumber(count)
  if n == nil or n < 0 then error('history writes: count ' .. count .. ' is not a number') end
  local out, i = {}, start + 1
  for w = 1, n do
    local wr = {mode = ARGV[i], domain = ARGV[i + 1], k = ARGV[i + 2], iv = tonumber(ARGV[i + 3]),
                rbin_old = tonumber(ARGV[i + 4]), rbin_new = tonumber(ARGV[i + 5]), outcome = ARGV[i + 6],
                saved = tonumber(ARGV[i + 7]), host = ARGV[i + 8], lie = ARGV[i + 9], record = ARGV[i + 10]}
    if wr.record == nil then error('history write ' .. w .. ': fewer than 11 values') end
    if wr.mode ~= 'c' and wr.mode ~= 'u' and wr.mode ~= 'd' then
      error('history write ' .. w .. ': mode ' .. wr.mode .. ' is not c, u or d')
    end
    if wr.domain == '' or wr.k == '' or not (wr.iv and wr.rbin_old and wr.rbin_new and wr.saved) then
      error('history write ' .. w .. ': domain, k, iv, rbin_old, rbin_new, saved')
    end
    if wr.mode ~= 'd' and #wr.record < recrawl.FIXED then
      error('history write ' .. w .. ': a record of ' .. #wr.record .. ' bytes')
    end
    if recrawl.OUTCOMES[wr.outcome] == nil then error('history write ' .. w .. ': outcome ' .. wr.outcome) end
    if wr.lie ~= '' and (recrawl.LIES[wr.lie] == nil or wr.host == '') then
      error('history write ' .. w .. ': lie ' .. wr.lie .. ' (of host "' .. wr.host .. '")')
    end
    out[w] = wr
    i = i + 11
  end
  return out, i
end

-- <record> with its 'last' (bytes 2-5, big-endian u32) set to <now> ms, as s
function recrawl.stamp(record, now)
  return string.sub(record, 1, 1) .. struct.pack('>I4', math.floor(now / 1000)) .. string.sub(record, 6)
end

-- Apply <writes> (read_writes) at <now> (ms, this call's clock), before
-- the call's acknowledgements; a write applies even when its lease expired
-- meanwhile (the visit happened).
--   c: a record exists -> only its 'last' moves (rv_refetched); else the
--      caps (meta rv_cap against stats rv_tracked, rv_domain_cap against
--      rdom n; 0: none) refuse it (rv_untracked, nothing written) or it is
--      stored (rv_created, rv_tracked +1, rdom n +1)
--   u: the record is gone -> rv_orphans, nothing written; its 'last' is not
--      the one the write was made from (the record's as the worker read it,
--      which the write's record still carries) -> rv_stale_writes, nothing
--      written nor counted (a retried call applies its writes once); else
--      replaced
--   d: the record and its due time gone, rdom n -1, lb<rbin_old> -1,
--      rv_tracked -1, rv_deleted (a record already gone: nothing)
--   c/u stored: 'last' stamped; due = now + max(iv s, rv_min), at most now +
--      rv_max; rdom lb<rbin_old> -1, lb<rbin_new> +1, since +1; the outcome
--      counted (rv_visits and rv_changed/rv_unchanged/rv_not_modified; saved
--      bytes into rv_bytes_saved); 'c' over an existing record is none of that
--   u of a record hinted by a sitemap (flag 0x08, recrawl_hint.lua), with an
--      outcome: rhost:<host> lastmod_ok +1 when it changed (rv_hints_right),
--      lastmod_bad +1 when not (rv_hints_wrong): the host's lastmod trust
--   a lie (any write): rhost:<host> lies_<kind> (ignored) +1, rv_lies_<kind>
--      +1; etag and lm distrust at once, lm_now and ignored from the 3rd
--      evidence on: etag / lm / all = now + rv_distrust
-- Then each touched domain's rdue and place in :ready follow due:<d>'s head
-- (revisit_ready). Returns how many creates the caps refused.
function recrawl.history_write(base, writes, now)
  if #writes == 0 then return 0 end
  local d = defaults(base)
  local stats = base .. ':stats'
  local counts, touched = {}, {}
  local function count(name, by) counts[name] = (counts[name] or 0) + (by or 1) end
  local tracked = tonumber(redis.call('HGET', stats, 'rv_tracked') or '0') or 0
  for _, w in ipairs(writes) do
    local hist, rdom = base .. ':hist:' .. w.domain, base .. ':rdom:' .. w.domain
    local due = base .. ':due:' .. w.domain
    if w.mode == 'd' then
      if redis.call('HDEL', hist, w.k) == 1 then
        redis.call('ZREM', due, w.k)
        redis.call('HINCRBY', rdom, 'n', -1)
        if w.rbin_old >= 0 then redis.call('HINCRBY', rdom, 'lb' .. w.rbin_old, -1) end
        tracked = tracked - 1
        count('rv_tracked', -1)
        count('rv_deleted')
        touched[w.domain] = true
      end
    else
      local old = redis.call('HGET', hist, w.k)
      local store = false
      if w.mode == 'c' and old then
        redis.call('HSET', hist, w.k, recrawl.stamp(old, now))
        count('rv_refetched')
      elseif w.mode == 'c' then
        if (d.rv_cap > 0 and tracked >= d.rv_cap) or (d.rv_domain_cap > 0 and
            (tonumber(redis.call('HGET', rdom, 'n') or '0') or 0) >= d.rv_domain_cap) then
          count('rv_untracked')
        else
          store = true
          tracked = tracked + 1
          redis.call('HINCRBY', rdom, 'n', 1)
          count('rv_tracked')
          count('rv_created')
        end
      elseif old and string.sub(old, 2, 5) ~= string.sub(w.record, 2, 5) then
        -- the record moved on since the visit read it (its 'last' differs): this write
        -- was applied already (a call retried after its reply was lost) or another
        -- visit's came first (a lease given twice); applied once, counted once
        count('rv_stale_writes')
        w.lie = ''
      elseif old then
        store = true
      else
        count('rv_orphans')
      end
      if store then
        redis.call('HSET', hist, w.k, recrawl.stamp(w.record, now))
        redis.call('ZADD', due, now + recrawl.due_in(w.iv, d), w.k)
        if w.rbin_old >= 0 then redis.call('HINCRBY', rdom, 'lb' .. w.rbin_old, -1) end
        if w.rbin_new >= 0 then redis.call('HINCRBY', rdom, 'lb' .. w.rbin_new, 1) end
        redis.call('HINCRBY', rdom, 'since', 1)
        touched[w.domain] = true
        local outcome = recrawl.OUTCOMES[w.outcome]
        if outcome then
          count('rv_visits')
          count(outcome)
        end
        if w.saved > 0 then count('rv_bytes_saved', w.saved) end
        if outcome and old and w.host ~= '' and bit.band(string.byte(old, 1), recrawl.HINTED) ~= 0 then
          -- a visit a sitemap's <lastmod> brought forward (recrawl_hint.lua): the host's evidence
          local right = w.outcome == 'c'
          redis.call('HINCRBY', base .. ':rhost:' .. w.host, right and 'lastmod_ok' or 'lastmod_bad', 1)
          count(right and 'rv_hints_right' or 'rv_hints_wrong')
        end
      end
    end
    if w.lie ~= '' then
      local kind, rhost = recrawl.LIES[w.lie], base .. ':rhost:' .. w.host
      local seen = redis.call('HINCRBY', rhost, kind[1], 1)
      if seen >= kind[3] then redis.call('HSET', rhost, kind[2], now + d.rv_distrust) end
      count('rv_lies_' .. w.lie)
    end
  end
  for name, by in pairs(counts) do redis.call('HINCRBY', stats, name, by) end
  for domain in pairs(touched) do revisit_ready(base, domain, now) end
  return counts.rv_untracked or 0
end

-- An excluded domain's history is gone (dequeue.lua drop_excluded): its
-- hist, due and rdom keys and its rdue entry; rv_tracked loses its tracked
-- URLs, counted rv_deleted. Returns how many were tracked.
function recrawl.recrawl_drop(base, domain)
  local hist = base .. ':hist:' .. domain
  local n = redis.call('HLEN', hist)
  redis.call('DEL', hist, base .. ':due:' .. domain, base .. ':rdom:' .. domain)
  redis.call('ZREM', base .. ':rdue', domain)
  if n > 0 then
    redis.call('HINCRBY', base .. ':stats', 'rv_tracked', -n)
    redis.call('HINCRBY', base .. ':stats', 'rv_deleted', n)
  end
  return n
end
