-- epoch: the frontier's epoch record, created when absent, on the server's
-- clock. A worker remembers the id it opened the frontier under; every
-- dequeue checks it (dequeue.lua), so a frontier that vanished (a restart
-- without persistence, a flush, a failover to an empty replica) or was
-- replaced is noticed on a round trip that happens anyway.
-- KEYS[1]  base key of the frontier
-- ARGV[1]  a new epoch id, used when the record is absent (or renewed); ""
--          only looks (an idle worker's epoch check): nothing is created
-- ARGV[2]  "" when opening; when going on after a loss, the id of the lost
--          epoch: if the record still holds it (the frontier went back in
--          time) it is replaced by ARGV[1]
-- ARGV[3]  floor of the lease id counter (base:seq) when going on after a
--          loss: lease ids of the lost epoch, still held by workers, can
--          never name a lease of the new one (0: leave the counter alone)
-- ARGV[4]  "1": a Redis Cluster's frontier, fenced after a failover first
--          (_lib.lua's fence(); a new record names this node); "" (or
--          absent): a standalone Redis, no fence
-- Returns {epoch id ("" when looking and there is none), created ms,
--          created (1: by this call, 0: found), seq, queued, fenced ms (0:
--          never fenced)}
local base = KEYS[1]
local key = base .. ':epoch'
local lost, floor = ARGV[2], tonumber(ARGV[3])
local fencing = ARGV[4] == '1'
local fenced = 0
if fencing then fenced = fence(base, now_ms()) end
local cur = redis.call('HMGET', key, 'id', 'created')
local made = 0
if ARGV[1] ~= '' and (not cur[1] or (lost ~= '' and cur[1] == lost)) then
  cur = {ARGV[1], tostring(now_ms())}
  redis.call('HSET', key, 'id', cur[1], 'created', cur[2])
  if fencing then redis.call('HSET', key, 'node', redis.call('CLUSTER', 'MYID')) end
  made = 1
end
local seq = tonumber(redis.call('GET', base .. ':seq') or '0')
if floor > seq then
  redis.call('SET', base .. ':seq', floor)
  seq = floor
end
local queued = tonumber(redis.call('HGET', base .. ':stats', 'queued') or '0') or 0
return {cur[1] or '', tonumber(cur[2]) or 0, made, seq, queued, fenced}
