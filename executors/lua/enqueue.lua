-- ENQUEUE: add a job once; a row of any type already at the id makes it a duplicate.
-- KEYS[1] = pending, KEYS[2] = delayed, KEYS[3] = the base; ARGV = id, payload, delay_ms
local id = ARGV[1]
local jk = KEYS[3] .. 'job:' .. id
if redis.call('EXISTS', jk) == 1 then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- delay_ms is below 2^52 (host guard), so now + delay is exact in a Lua number
local delay = tonumber(ARGV[3])
if delay == 0 then
  redis.call('HSET', jk, 'payload', ARGV[2], 'state', 'pending', 'enqueued_at', now)
  redis.call('ZADD', KEYS[1], now, id)
else
  redis.call('HSET', jk, 'payload', ARGV[2], 'state', 'delayed', 'enqueued_at', now)
  redis.call('ZADD', KEYS[2], now + delay, id)
end
return 1
