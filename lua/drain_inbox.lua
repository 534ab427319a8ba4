#!lua
-- flagged: when Redis is out of memory it refuses the whole call up front,
-- never half of it.
-- drain_inbox: move requests forwarded by other shards into this frontier,
-- atomically: popped, deduplicated and queued in one call, so nothing is
-- lost and nothing is doubled.
-- KEYS[1]  base key of the frontier
-- ARGV[1]  dedup mode;  ARGV[2]  per-domain budget
-- ARGV[3]  maximum number of records to move
-- A record is "<a>\n<b>\n<domain>\n<priority>\n<entry>" (see enqueue.lua for a, b).
-- Returns {moved, added, duplicates, spilled, over_budget, excluded}
local base = KEYS[1]
local records = redis.call('LPOP', base .. ':inbox', tonumber(ARGV[3]))
if not records then return {0, 0, 0, 0, 0, 0} end
local offer = new_offer(base, ARGV[1], tonumber(ARGV[2]))
for _, rec in ipairs(records) do
  local i = string.find(rec, '\n', 1, true)
  local j = string.find(rec, '\n', i + 1, true)
  local domain, prio, entry = split_record(string.sub(rec, j + 1))
  offer.one(string.sub(rec, 1, i - 1), string.sub(rec, i + 1, j - 1), domain, prio, entry, '1')
end
local r = offer.finish()
redis.call('HINCRBY', base .. ':stats', 'inbox_drained', #records)
return {#records, r[1], r[2], r[3], r[4], r[5]}
