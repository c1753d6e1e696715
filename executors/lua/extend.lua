-- EXTEND: push a held lease's deadline to now + lease_ms, behind the fence.
-- KEYS[1] = active, KEYS[2] = the base; ARGV = id, token, lease_ms
local id = ARGV[1]
-- the fence: a member of active whose row's attempts is the presented token (compared as bytes:
-- the host sends the canonical decimal, HINCRBY stores one)
if redis.call('ZSCORE', KEYS[1], id) == false then return 0 end
local jk = KEYS[2] .. 'job:' .. id
if redis.call('HGET', jk, 'attempts') ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), id)
return 1
