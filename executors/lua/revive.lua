-- REVIVE: a dead job goes back to pending with its stall count reset (attempts keep growing).
-- KEYS[1] = dead, KEYS[2] = pending, KEYS[3] = the base; ARGV[1] = id
local id = ARGV[1]
if redis.call('ZSCORE', KEYS[1], id) == false then return 0 end
redis.call('ZREM', KEYS[1], id)
local jk = KEYS[3] .. 'job:' .. id
-- a ghost (no row) is consumed, as in CLAIM: nothing is minted
if redis.call('EXISTS', jk) == 0 then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[2], now, id)
redis.call('HSET', jk, 'state', 'pending', 'stalled', 0)
return 1
