#!lua flags=allow-oom
-- allow-oom: it stores nothing new (a claim moves a score), so the compact
-- tier keeps moving records up when Redis is out of memory.
-- tier_take: claim up to N jobs of the compact tier (_lib.lua: push(),
-- tier_refill()) whose time has come, each with what it works on. A claimed
-- job's score moves to now + the claim: if its reply (tier_done.lua) never
-- comes, another worker takes it then. A job with nothing left to do is
-- dropped here; a fill's domain whose head waited for it is readied.
-- KEYS[1]  base key of the frontier
-- ARGV[1]  maximum number of jobs
-- ARGV[2]  claim, ms
-- ARGV[3]  most records one pack job takes (a multiple of meta 'block')
-- Returns a list of jobs, each {kind, domain, priority, count, work}:
--   'p' (pack): count = dom:<d> so:<p>, work = the spill's first records,
--               a whole number of blocks (meta 'block' records each);
--   'f' (fill): count = dom:<d> zo:<p>, work = the first block.
local base = KEYS[1]
local now = now_ms()
local claim = tonumber(ARGV[2])
local d = defaults(base)
local most = math.max(d.block, tonumber(ARGV[3]) - tonumber(ARGV[3]) % d.block)
local jobs = {}
for _, job in ipairs(redis.call('ZRANGEBYSCORE', base .. ':tiers', '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))) do
  local kind, domain, prio = string.match(job, '^(.)\n(.*)\n(.*)$')
  local _, z, s = tier_keys(base, domain, prio)
  local dkey = base .. ':dom:' .. domain
  local work = nil
  if kind == 'p' then
    local len = redis.call('LLEN', s)
    if len >= d.block then work = redis.call('LRANGE', s, 0, math.min(len - len % d.block, most) - 1) end
  elseif kind == 'f' then
    work = redis.call('LINDEX', z, 0)
    if not work then tier_unwait(base, domain, now) end
  end
  if work then
    redis.call('ZADD', base .. ':tiers', now + claim, job)
    local count = redis.call('HGET', dkey, (kind == 'p' and 'so:' or 'zo:') .. prio) or '0'
    jobs[#jobs + 1] = {kind, domain, prio, count, work}
  else
    redis.call('ZREM', base .. ':tiers', job)
  end
end
return jobs
