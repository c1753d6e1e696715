-- COMPLETE: a lease holder finishes its job; the job moves to done and is counted.
-- KEYS[1] = active, KEYS[2] = done, KEYS[3] = the base; ARGV = id, token
local id = ARGV[1]
if redis.call('ZSCORE', KEYS[1], id) == false then return 0 end
local jk = KEYS[3] .. 'job:' .. id
if redis.call('HGET', jk, 'attempts') ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', jk, 'state', 'done', 'finished_at', now)
redis.call('ZADD', KEYS[2], now, id)
redis.call('HINCRBY', KEYS[3] .. 'metrics:completed', 'count', 1)
return 1
