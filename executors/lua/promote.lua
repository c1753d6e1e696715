-- PROMOTE: move due delayed jobs (score <= now, oldest first, at most limit) to pending.
-- KEYS[1] = delayed, KEYS[2] = pending, KEYS[3] = the base; ARGV[1] = limit
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
local promoted = 0
for i = 1, #due, 2 do
  local id = due[i]
  redis.call('ZREM', KEYS[1], id)
  local jk = KEYS[3] .. 'job:' .. id
  -- a ghost (no row) is dropped: it leaves delayed and goes nowhere
  if redis.call('EXISTS', jk) == 1 then
    -- the pending score is the due score exactly as stored (the string WITHSCORES gave)
    redis.call('ZADD', KEYS[2], due[i + 1], id)
    redis.call('HSET', jk, 'state', 'pending')
    promoted = promoted + 1
  end
end
return promoted
