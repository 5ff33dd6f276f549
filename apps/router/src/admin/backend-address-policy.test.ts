import { describe, expect, it } from 'vitest';
import { BackendAddressPolicy, type ResolvedAddress } from './backend-address-policy';

/** A resolver from a table: no DNS query leaves the process. */
function resolverOf(table: Record<string, string[]>) {
  const asked: string[] = [];
  const resolve = async (hostname: string): Promise<readonly ResolvedAddress[]> => {
    asked.push(hostname);
    const addresses = table[hostname];
    if (addresses === undefined) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return { resolve, asked };
}

const TABLE = {
  'metadata-alias.test': ['169.254.169.254'],
  'mixed.test': ['10.0.0.5', '169.254.10.1'],
  'redis.internal': ['10.0.0.9'],
  'engine.test': ['10.0.0.7'],
  'v6-metadata.test': ['fd00:ec2::254'],
};

describe('BackendAddressPolicy', () => {
  const open = new BackendAddressPolicy({
    allowlist: [],
    redisUrl: 'redis://redis.internal:6379',
    resolve: resolverOf(TABLE).resolve,
  });

  it.each([
    ['http://169.254.169.254/latest/meta-data', /metadata/],
    ['http://169.254.1.1:8000', /link-local/],
    ['http://[fe80::1]:8000', /link-local/],
    ['http://[fd00:ec2::254]/', /metadata/],
    ['http://[::ffff:169.254.169.254]/', /metadata/],
    ['http://[::ffff:0:a9fe:a9fe]/', /metadata/],
    ['http://[64:ff9b::a9fe:a9fe]/', /metadata/],
    ['http://[64:ff9b::169.254.169.254]/', /metadata/],
    ['http://100.100.100.200/latest/meta-data', /metadata/],
    ['http://metadata.google.internal/computeMetadata/v1/', /metadata/],
    ['http://0.0.0.0:8000', /this host/],
    ['http://metadata-alias.test:8000', /resolves to 169\.254\.169\.254/],
    ['http://mixed.test:8000', /169\.254\.10\.1.*link-local/],
    ['http://v6-metadata.test:8000', /metadata/],
    ['http://redis.internal:6379', /own Redis/],
    ['http://10.0.0.9:6379', /own Redis/],
  ])('denies %s by default', async (url, reason) => {
    const verdict = await open.check(url);
    expect(verdict.allowed).toBe(false);
    expect(!verdict.allowed && verdict.reason).toMatch(reason);
  });

  it('accepts other addresses when no allowlist is set, with the addresses it checked', async () => {
    expect(await open.check('http://10.0.0.9:8000')).toMatchObject({ allowed: true });
    expect(await open.check('http://engine.test:8000')).toEqual({
      allowed: true,
      hostname: 'engine.test',
      addresses: [{ address: '10.0.0.7', family: 4 }],
    });
  });

  it('denies every node a Redis Cluster URL names, by name or address, and only on its port', async () => {
    const cluster = new BackendAddressPolicy({
      allowlist: [],
      redisUrl: 'redis+cluster://:secret@redis.internal:7000,10.0.0.20:7001',
      resolve: resolverOf(TABLE).resolve,
    });
    for (const url of ['http://redis.internal:7000', 'http://10.0.0.9:7000', 'http://10.0.0.20:7001']) {
      const verdict = await cluster.check(url);
      expect(!verdict.allowed && verdict.reason).toMatch(/own Redis/);
    }
    expect((await cluster.check('http://10.0.0.9:7001')).allowed).toBe(true);
    expect((await cluster.check('http://10.0.0.20:7000')).allowed).toBe(true);
  });

  it('with an allowlist, accepts only listed names and addresses in listed CIDRs', async () => {
    const policy = new BackendAddressPolicy({
      allowlist: ['10.0.0.0/30', 'engine.test'],
      redisUrl: undefined,
      resolve: resolverOf(TABLE).resolve,
    });
    expect((await policy.check('http://10.0.0.2:8000')).allowed).toBe(true);
    expect((await policy.check('http://engine.test:8000')).allowed).toBe(true);
    const outside = await policy.check('http://10.0.0.9:8000');
    expect(!outside.allowed && outside.reason).toMatch(/not in backendAllowlist/);
  });

  it('lifts a denial only for an entry naming the denied address or a range inside it', async () => {
    const broad = new BackendAddressPolicy({
      allowlist: ['0.0.0.0/0'],
      redisUrl: undefined,
      resolve: resolverOf(TABLE).resolve,
    });
    expect((await broad.check('http://169.254.169.254/')).allowed).toBe(false);
    const named = new BackendAddressPolicy({
      allowlist: ['169.254.169.254/32', '10.0.0.9:6379'],
      redisUrl: 'redis://10.0.0.9:6379',
      resolve: resolverOf(TABLE).resolve,
    });
    expect((await named.check('http://169.254.169.254/')).allowed).toBe(true);
    expect((await named.check('http://169.254.1.1/')).allowed).toBe(false);
    expect((await named.check('http://10.0.0.9:6379/')).allowed).toBe(true);
  });

  it('opens a metadata address only for an entry of exactly that address, not for the link-local range around it', async () => {
    const linkLocal = new BackendAddressPolicy({
      allowlist: ['169.254.0.0/16'],
      redisUrl: undefined,
      resolve: resolverOf(TABLE).resolve,
    });
    expect((await linkLocal.check('http://169.254.20.10:53/')).allowed).toBe(true);
    expect((await linkLocal.check('http://169.254.169.254/')).allowed).toBe(false);
    expect((await linkLocal.check('http://[64:ff9b::a9fe:a9fe]/')).allowed).toBe(false);
  });

  it('never resolves a denied metadata name, and reports an unresolvable name as such', async () => {
    const resolver = resolverOf(TABLE);
    const policy = new BackendAddressPolicy({ allowlist: [], redisUrl: undefined, resolve: resolver.resolve });
    await policy.check('http://metadata.google.internal/');
    expect(resolver.asked).toEqual([]);
    expect(await policy.check('http://nowhere.test:8000')).toMatchObject({ allowed: false, unresolved: true });
    expect((await policy.check('http://user:pw@10.0.0.7:8000')).allowed).toBe(false);
  });
});

describe('BackendAddressPolicy.connectLookup (DNS rebinding)', () => {
  type Answer = { error: NodeJS.ErrnoException | null; address: unknown; family?: number };
  const lookUp = (
    lookup: ReturnType<BackendAddressPolicy['connectLookup']>,
    options: Parameters<typeof lookup>[1],
  ): Promise<Answer> =>
    new Promise((resolve) =>
      lookup('ignored-the-url-decides', options, (error, address, family) => resolve({ error, address, family })),
    );

  it('resolves at every connect, hands the socket exactly the addresses it checked, and refuses a name that turned bad', async () => {
    const table: Record<string, string[]> = { 'rebind.test': ['10.0.0.7', 'fd00::7'] };
    const resolver = resolverOf(table);
    const policy = new BackendAddressPolicy({ allowlist: [], redisUrl: undefined, resolve: resolver.resolve });
    const lookup = policy.connectLookup('http://rebind.test:8000/v1');
    expect(await lookUp(lookup, { all: true })).toEqual({
      error: null,
      address: [
        { address: '10.0.0.7', family: 4 },
        { address: 'fd00::7', family: 6 },
      ],
      family: undefined,
    });
    expect(await lookUp(lookup, { family: 6 })).toEqual({ error: null, address: 'fd00::7', family: 6 });
    expect(await lookUp(lookup, {})).toEqual({ error: null, address: '10.0.0.7', family: 4 });

    // The attacker's DNS now answers the metadata service: the next connection fails before any socket.
    table['rebind.test'] = ['169.254.169.254'];
    const refused = await lookUp(lookup, { all: true });
    expect(refused.error?.code).toBe('ROUTER_BACKEND_ADDRESS_DENIED');
    expect(refused.error?.message).toContain('cloud metadata');
    // One resolution per connection, none shared with an earlier check.
    expect(resolver.asked).toEqual(['rebind.test', 'rebind.test', 'rebind.test', 'rebind.test']);
  });

  it('fails a connection whose name no longer resolves, or has no address of the family asked', async () => {
    const table: Record<string, string[]> = { 'v4only.test': ['10.0.0.8'] };
    const policy = new BackendAddressPolicy({ allowlist: [], redisUrl: undefined, resolve: resolverOf(table).resolve });
    expect((await lookUp(policy.connectLookup('http://v4only.test:8000'), { family: 6 })).error?.code).toBe(
      'ENOTFOUND',
    );
    delete table['v4only.test'];
    expect((await lookUp(policy.connectLookup('http://v4only.test:8000'), {})).error?.code).toBe(
      'ROUTER_BACKEND_ADDRESS_DENIED',
    );
  });
});

describe('BackendAddressPolicy: canonical addresses (issue 30)', () => {
  const local = {
    'localhost.test': ['::1'],
    'lan-name.test': ['10.1.2.3'],
  };

  it.each([
    'http://[::1]:6379',
    'http://[0:0:0:0:0:0:0:1]:6379',
    'http://[::ffff:127.0.0.1]:6379',
    'http://[::ffff:7f00:1]:6379',
    'http://127.0.0.2:6379',
    'http://10.1.2.3:6379',
    'http://localhost.test:6379',
    'http://lan-name.test:6379',
  ])('denies %s: every spelling of this host is the Redis at 127.0.0.1:6379', async (url) => {
    const policy = new BackendAddressPolicy({
      allowlist: [],
      redisUrl: 'redis://127.0.0.1:6379',
      resolve: resolverOf(local).resolve,
      localAddresses: ['10.1.2.3', 'fe80::1%eth0'],
    });
    const verdict = await policy.check(url);
    expect(!verdict.allowed && verdict.reason).toMatch(/own Redis/);
  });

  it('denies a Redis named by an IPv6 spelling through its IPv4 and loopback twins', async () => {
    const policy = new BackendAddressPolicy({
      allowlist: [],
      redisUrl: 'redis://[0:0:0:0:0:0:0:1]:6380',
      resolve: resolverOf(local).resolve,
    });
    for (const url of ['http://127.0.0.1:6380', 'http://[::1]:6380']) {
      const verdict = await policy.check(url);
      expect(!verdict.allowed && verdict.reason, url).toMatch(/own Redis/);
    }
    expect((await policy.check('http://[::1]:8000')).allowed).toBe(true);
  });

  it("denies the router's own listeners, configured and bound, in every spelling and whatever the allowlist", async () => {
    const policy = new BackendAddressPolicy({
      allowlist: ['127.0.0.0/8', '::1/128', '127.0.0.1:8080'],
      redisUrl: undefined,
      resolve: resolverOf(local).resolve,
      ownListeners: [
        { address: '0.0.0.0', port: 8080 },
        { address: '127.0.0.1', port: 0 },
      ],
    });
    policy.denyOwnListeners([{ address: '127.0.0.1', port: 41_234 }]);
    for (const url of [
      'http://127.0.0.1:8080',
      'http://[::1]:8080',
      'http://localhost.test:41234',
      'http://[::ffff:7f00:1]:41234',
      'http://127.0.0.1:41234/v1',
    ]) {
      const verdict = await policy.check(url);
      expect(!verdict.allowed && verdict.reason, url).toMatch(/own listener/);
    }
    expect((await policy.check('http://127.0.0.1:8000')).allowed).toBe(true);
    // Port 0 (not bound yet) denies nothing.
    expect((await policy.check('http://127.0.0.1:80')).allowed).toBe(true);
  });
});
