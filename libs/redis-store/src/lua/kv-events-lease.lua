--[[
  kv-events-lease: one poller replica's hold on one KV-event subscription (a backend rank's event
  stream, which exactly one replica reads and indexes at a time), and the stream's cursor: the last
  sequence number whose batch was applied to the owner index, from which the next holder replays (so
  a replica that dies leaves no gap; what it applied after its last advance is applied again, which
  apply-kv-events.lua makes harmless). The lease is a STRING holding the replica id with a TTL; the
  holder renews it well within the TTL, and only the holder moves the cursor, so a replica that lost
  its lease (paused past the TTL) learns it at its next call and stops.

  KEYS[1]  <ns>:{kv-events}:lease:<subscription>    STRING holder replica id, PX lease TTL
  KEYS[2]  <ns>:{kv-events}:cursor:<subscription>   STRING last applied sequence number (decimal u64)
  ARGV[1]  op: 'acquire' | 'renew' | 'advance' | 'release'
  ARGV[2]  replica id
  ARGV[3]  lease TTL ms (acquire, renew, advance)
  ARGV[4]  advance, release: the sequence number to store as applied ('' = leave the cursor);
           the cursor lives ARGV[5] ms after its last write (a departed backend's goes by itself)
  ARGV[5]  cursor TTL ms

  Returns { 1 = held by this replica (after the op; release: 1 = it was), 0 = not; the cursor ('' = none) }.
]]

local op, replica, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local holder = redis.call('GET', KEYS[1])
local mine = holder == replica
if op == 'acquire' then
  if not holder then
    redis.call('SET', KEYS[1], replica, 'PX', ttl)
    mine = true
  elseif mine then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
elseif op == 'renew' or op == 'advance' or op == 'release' then
  if mine then
    if (op == 'advance' or op == 'release') and ARGV[4] ~= '' then
      redis.call('SET', KEYS[2], ARGV[4], 'PX', tonumber(ARGV[5]))
    end
    if op == 'release' then redis.call('DEL', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], ttl) end
  end
else
  error('kv-events-lease: unknown op ' .. op)
end
return { mine and 1 or 0, redis.call('GET', KEYS[2]) or '' }
