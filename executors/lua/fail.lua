-- FAIL: a lease holder reports an error; the job retries after a backoff or is dead-lettered.
-- KEYS[1] = active, KEYS[2] = delayed, KEYS[3] = dead, KEYS[4] = the base
-- ARGV = id, token, error, max_attempts, backoff_ms
local id = ARGV[1]
if redis.call('ZSCORE', KEYS[1], id) == false then return 0 end
local jk = KEYS[4] .. 'job:' .. id
local attempts = redis.call('HGET', jk, 'attempts')
if attempts ~= ARGV[2] then return 0 end
-- attempts >= max_attempts on canonical non-negative decimals: by length, then lexically, which
-- is exact over all of i64 where Lua numbers (doubles) are not
local max_attempts = ARGV[4]
local exhausted
if #attempts ~= #max_attempts then
  exhausted = #attempts > #max_attempts
else
  exhausted = attempts >= max_attempts
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', KEYS[1], id)
if exhausted then
  redis.call('HSET', jk, 'state', 'dead', 'last_error', ARGV[3])
  redis.call('ZADD', KEYS[3], 0, id)
  redis.call('HINCRBY', KEYS[4] .. 'metrics:failed', 'count', 1)
  return 'dead'
end
redis.call('HSET', jk, 'state', 'delayed', 'last_error', ARGV[3])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), id)
return 'retry'
