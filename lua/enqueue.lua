#!lua
-- flagged: when Redis is out of memory it refuses the whole call up front,
-- never half of it.
-- enqueue: dedup and push a batch of requests in one call; ack leases,
-- the fetch history's writes riding on them first (_recrawl.lua); promote
-- the requests a worker found many links to (the in-link order).
-- KEYS[1]  base key of the frontier
-- KEYS[2]  its address space (optional: see _lib.lua's IPB; acknowledgements free addresses)
-- ARGV[1]  dedup mode: "exact" | "bloom" | "none"
-- ARGV[2]  per-domain budget: requests ever admitted (0: no budget)
-- ARGV[3]  number of lease ids to acknowledge, then the ids
-- then     number of history writes, then 11 values each (_recrawl.lua
--          read_writes), applied before the acknowledgements
-- then     number of promotions, then 4 values each: domain, priority,
--          entry, position in its queue (_lib.lua's promote())
-- then     number of domains linked to, then per domain: the domain, the
--          number of domains seen linking to it, those domains (each
--          added to its HyperLogLog inl:<d>, the rank order's weight),
--          counted before the requests' budgets are read
-- then per group of requests of one domain and priority: domain,
--          priority, filter ("1" dedup, "0" dont_filter; "m": each request
--          says), the number of requests, then a request's 3 values (a, b,
--          entry; "m": 4, its filter last); the requests are offered in the
--          order sent, their places (1-based) counted so
--   exact: a = bucket, b = 64-bit digest slice as a decimal integer
--   bloom: a, b = two 32-bit hashes of the digest (double hashing)
-- Returns {added, duplicates, spilled, acked, over_budget, excluded, unseen, untracked, seqs, promoted}:
--   spilled counts the added requests queued past their domain's head (the
--   compact tier: _lib.lua's push()); unseen lists the 1-based places of the
--   requests to dedup ("1") that were not marked seen (over budget or
--   excluded); untracked counts the history creates a recrawl cap refused;
--   seqs, in the in-link order, {place, position, ...} of the requests
--   added; promoted, per promotion, its outcome and the requests its queue
--   had given so far (promote()).
local base = KEYS[1]
local acks, i = read_list(3)
local writes
writes, i = recrawl.read_writes(i)
local now = now_ms()
local untracked = recrawl.history_write(base, writes, now)
local acked = ack_all(base, acks, now)
local promoted = {}
local promotions = tonumber(ARGV[i])
i = i + 1
for _ = 1, promotions do
  local outcome, given = promote(base, ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), now)
  redis.call('HINCRBY', base .. ':stats', outcome == 'promoted' and 'promoted' or 'promote_' .. outcome, 1)
  promoted[#promoted + 1] = outcome
  promoted[#promoted + 1] = given
  i = i + 4
end
local targets = tonumber(ARGV[i])
i = i + 1
for _ = 1, targets do
  local key, last = base .. ':inl:' .. ARGV[i], i + 1 + tonumber(ARGV[i + 1])
  for j = i + 2, last, 500 do redis.call('PFADD', key, unpack(ARGV, j, math.min(j + 499, last))) end
  i = last + 1
end
local offer = new_offer(base, ARGV[1], tonumber(ARGV[2]))
local unseen, n = {}, 0
while i + 3 <= #ARGV do
  local domain, prio, filter = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local width = filter == 'm' and 4 or 3
  local last = i + 3 + width * tonumber(ARGV[i + 3])
  for j = i + 4, last, width do
    n = n + 1
    local f = width == 4 and ARGV[j + 3] or filter
    if not offer.one(ARGV[j], ARGV[j + 1], domain, prio, ARGV[j + 2], f, n) and f == '1' then
      unseen[#unseen + 1] = n
    end
  end
  i = last + 1
end
local r = offer.finish()
return {r[1], r[2], r[3], acked, r[4], r[5], unseen, untracked, r[6], promoted}
