-- SWEEP: expired leases (score <= now, oldest first, at most limit) go back to pending or die.
-- KEYS[1] = active, KEYS[2] = pending, KEYS[3] = dead, KEYS[4] = the base
-- ARGV = max_stalled, limit
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[2])
local max_stalled = tonumber(ARGV[1])
local recovered, dead, ghosts = 0, 0, 0
for _, id in ipairs(expired) do
  -- every member leaves active first
  redis.call('ZREM', KEYS[1], id)
  local jk = KEYS[4] .. 'job:' .. id
  if redis.call('EXISTS', jk) == 0 then
    ghosts = ghosts + 1
  else
    local stalled = redis.call('HINCRBY', jk, 'stalled', 1)
    if stalled >= max_stalled then
      redis.call('HSET', jk, 'state', 'dead', 'last_error', 'stalled')
      redis.call('ZADD', KEYS[3], 0, id)
      redis.call('HINCRBY', KEYS[4] .. 'metrics:failed', 'count', 1)
      dead = dead + 1
    else
      redis.call('HSET', jk, 'state', 'pending')
      redis.call('ZADD', KEYS[2], 0, id)
      recovered = recovered + 1
    end
  end
end
-- the scripts know no restart exemption: the last count is always 0
return {recovered, dead, ghosts, 0}
