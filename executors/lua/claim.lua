-- CLAIM: the retired @claim2 script, line for line; the host reads `paused?` before sending it.
-- KEYS[1] = pending, KEYS[2] = active, KEYS[3] = the base; ARGV[1] = lease_ms
-- pop first: the oldest pending id leaves the set before anything is checked
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then return {} end
local id = popped[1]
-- the row key is derived from the declared root KEYS[3], so it shares the queue's hashtag
local jk = KEYS[3] .. 'job:' .. id
-- a ghost (no row) is already consumed by the pop; answer empty, mint nothing
if redis.call('EXISTS', jk) == 0 then return {} end
-- the fencing token: attempts goes up by one and comes back as att
local att = redis.call('HINCRBY', jk, 'attempts', 1)
redis.call('HSET', jk, 'state', 'active')
-- the lease is a score on the active set, on the server clock: TIME in milliseconds
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
return {id, redis.call('HGET', jk, 'payload'), att}
