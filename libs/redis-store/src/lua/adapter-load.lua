--[[
  adapter-load: the router fleet's on-demand loads of LoRA adapters onto backends (issue 33), so that of N
  router replicas one loads an adapter onto a backend, loads are spaced per backend, and a failed load keeps
  the adapter off that backend for a while. All keys of one base model share its hash tag.

  KEYS[1]  <ns>:{lora:<base>}:claim:<backend>:<adapter>        STRING the claiming replica's token, PX = load timeout
  KEYS[2]  <ns>:{lora:<base>}:spacing:<backend>                STRING present while a load on the backend is too recent
  KEYS[3]  <ns>:{lora:<base>}:unavailable:<backend>:<adapter>  STRING present while a failed load keeps it off
  KEYS[4]  <ns>:{lora:<base>}:loaded:<adapter>                 HASH backend id -> ms it was loaded there, or
                                                               'loading' while a claimed load runs (other replicas
                                                               route to it there meanwhile)
  ARGV[1]  op: 'claim' | 'loaded' | 'failed' | 'unloaded'
  ARGV[2]  backend id
  ARGV[3]  the replica's token (claim, loaded, failed: only the claim's holder settles it)
  ARGV[4]  claim: load timeout ms; loaded: now ms; failed: how long the adapter stays off the backend, ms
  ARGV[5]  claim: least ms between two loads on one backend (0 = no spacing); loaded: the loaded hash's TTL, ms
  ARGV[6]  claim: the loaded hash's TTL, ms

  Returns, for claim: 'loaded' (there already), 'unavailable', 'busy' (another replica is loading it there),
  'spaced' (the backend loaded another adapter too recently) or 'claimed' (this replica loads it now);
  for the others: 'ok'.
]]

local op, backend, token = ARGV[1], ARGV[2], ARGV[3]

if op == 'claim' then
  local state = redis.call('HGET', KEYS[4], backend)
  if state and state ~= 'loading' then return 'loaded' end
  if redis.call('EXISTS', KEYS[3]) == 1 then return 'unavailable' end
  if redis.call('EXISTS', KEYS[1]) == 1 then return 'busy' end
  local spacing = tonumber(ARGV[5])
  if spacing > 0 then
    if redis.call('EXISTS', KEYS[2]) == 1 then return 'spaced' end
    redis.call('SET', KEYS[2], token, 'PX', spacing)
  end
  redis.call('SET', KEYS[1], token, 'PX', ARGV[4])
  -- A 'loading' left by a replica that died mid-load is taken over here.
  redis.call('HSET', KEYS[4], backend, 'loading')
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
  return 'claimed'
end

if op == 'unloaded' then
  redis.call('HDEL', KEYS[4], backend)
  return 'ok'
end

-- loaded / failed: the claim is settled by its holder only (a claim that timed out may be another's now).
if redis.call('GET', KEYS[1]) == token then redis.call('DEL', KEYS[1]) end
if op == 'loaded' then
  redis.call('HSET', KEYS[4], backend, ARGV[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
  redis.call('DEL', KEYS[3])
elseif op == 'failed' then
  -- PX 0 is an error: a failed load that keeps nothing off sets nothing.
  if tonumber(ARGV[4]) > 0 then redis.call('SET', KEYS[3], '1', 'PX', ARGV[4]) end
  if redis.call('HGET', KEYS[4], backend) == 'loading' then redis.call('HDEL', KEYS[4], backend) end
end
return 'ok'
