--[[
  change-api-keys: adds or revokes one client API key (docs/adr/0006-tenants-keys-limits.md). Keys are
  stored by the SHA-256 of the secret, never the secret; the id index lets an operator revoke a key by
  its id without knowing the secret. Both hashes change together or not at all.

  KEYS[1]  <ns>:{api-keys}:by-digest   HASH sha-256 hex of the secret -> key record JSON
  KEYS[2]  <ns>:{api-keys}:by-id       HASH key id -> sha-256 hex of its secret
  ARGV[1]  'add' | 'revoke'
  ARGV[2]  key id
  ARGV[3]  add: the digest (64 hex characters)
  ARGV[4]  add: the record JSON (the router validates it; this script stores it as it is)

  Returns 1 when it changed something, 0 when not: add of an id or digest that exists, revoke of an
  id that does not.
]]

local id = ARGV[2]
if ARGV[1] == 'add' then
  local digest = ARGV[3]
  if redis.call('HEXISTS', KEYS[2], id) == 1 or redis.call('HEXISTS', KEYS[1], digest) == 1 then return 0 end
  redis.call('HSET', KEYS[1], digest, ARGV[4])
  redis.call('HSET', KEYS[2], id, digest)
  return 1
end

local digest = redis.call('HGET', KEYS[2], id)
if not digest then return 0 end
redis.call('HDEL', KEYS[1], digest)
redis.call('HDEL', KEYS[2], id)
return 1
