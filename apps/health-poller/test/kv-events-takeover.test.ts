import type { KvEventsLeases } from '@kvroute/redis-store';
import { Packr } from 'msgpackr';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { blockStored, TestKvPublisher } from './kv-events-publisher';
import {
  BLOCK,
  eventually,
  openIndexerEnv,
  stream,
  tokenChain,
  type IndexerEnv,
  type TokenChain,
} from './kv-events-support';

/**
 * The indexer where a stream changes hands or misbehaves: an engine restarted while no replica read
 * it, a replay buffer that no longer reaches the cursor, a frame past the byte bound, an endpoint
 * zeromq cannot connect to, and leases (one acquired while the replica closes, one that lapsed).
 * Real sockets on loopback, a real Redis.
 */
let env: IndexerEnv;
const publishers: TestKvPublisher[] = [];
beforeAll(async () => {
  env = await openIndexerEnv('kv-events-takeover');
});
beforeEach((context) => env.beginTest(context.task.name.slice(0, 12)));
afterAll(async () => {
  await env.close();
  await Promise.all(publishers.map((publisher) => publisher.close()));
});

async function publisher(): Promise<TestKvPublisher> {
  const opened = await TestKvPublisher.open();
  publishers.push(opened);
  return opened;
}

/** Block `from` … `to - 1` of a chain as one BlockStored event. */
function blocks(chain: TokenChain, from: number, to: number): unknown {
  const parent = from === 0 ? null : (chain.hashes[from - 1] as bigint);
  return blockStored(chain.hashes.slice(from, to), parent, chain.tokens.slice(from * BLOCK, to * BLOCK), BLOCK);
}

/** Publishes until the indexer has applied it (a SUB joins some ms after connecting): each copy is a batch. */
async function publishUntil(
  pub: TestKvPublisher,
  events: unknown[],
  read: () => Promise<boolean>,
  what = 'the subscriber to join',
): Promise<void> {
  await eventually(what, async () => {
    await pub.publish(events);
    return read();
  });
}

/** A first replica reads `old` from the publisher, then closes with its cursor stored past `batches`. */
async function readThenClose(pub: TestKvPublisher, rankId: string, old: TokenChain, batches: number): Promise<void> {
  const first = env.startIndexer(`${rankId}-first`, [stream(rankId, pub.endpoint, pub.replayEndpoint)]);
  await publishUntil(pub, [blocks(old, 0, old.names.length)], async () => {
    return (await env.depth('m', rankId, old.names)) === old.names.length;
  });
  for (let i = 0; i < batches; i++) await pub.publish([]);
  await eventually('every batch applied', async () => {
    return first.indexer.subscriptionOf(rankId)?.lastApplied === pub.nextSeq - 1n;
  });
  await first.indexer.close();
}

describe('KV-event stream takeover', { timeout: 60_000 }, () => {
  it('forgets a rank whose engine restarted while nobody read it, and indexes the new engine from its first batch', async () => {
    const pub = await publisher();
    const old = tokenChain(40, 2);
    await readThenClose(pub, 'r', old, 10);
    // The engine restarts (numbers from 0 again) and stores a chain before any replica reads it.
    await pub.restart();
    const fresh = tokenChain(41, 3);
    await pub.publish([blocks(fresh, 0, 2)]);
    const second = env.startIndexer('r-second', [stream('r', pub.endpoint, pub.replayEndpoint)]);
    await eventually('the new engine’s buffered batch', async () => (await env.depth('m', 'r', fresh.names)) === 2);
    expect(await env.depth('m', 'r', old.names)).toBe(0);
    // Its next live batch (sequence 1, far below the old cursor) is applied, not taken for a duplicate.
    await publishUntil(pub, [blocks(fresh, 2, 3)], async () => (await env.depth('m', 'r', fresh.names)) === 3);
    expect(await second.metrics.kvCount('resyncs', 'restart')).toBeGreaterThanOrEqual(1);
    expect(await second.metrics.kvCount('problems', 'sequence_backwards')).toBeGreaterThanOrEqual(1);
  });

  it('tells the same publisher whose buffer no longer reaches the cursor from a restart (a gap resync)', async () => {
    const pub = await publisher();
    const old = tokenChain(42, 2);
    await readThenClose(pub, 's', old, 3);
    // Published while nobody reads; the ring then keeps only the last two: the first is lost.
    const later = tokenChain(43, 3);
    for (let i = 0; i < 3; i++) await pub.publish([blocks(later, i, i + 1)]);
    pub.trim(2);
    const second = env.startIndexer('s-second', [stream('s', pub.endpoint, pub.replayEndpoint)]);
    await eventually('the batches the ring still held', async () => {
      return second.indexer.subscriptionOf('s')?.lastApplied === pub.nextSeq - 1n;
    });
    expect(await second.metrics.kvCount('problems', 'replay_short')).toBe(1);
    expect(await second.metrics.kvCount('resyncs', 'gap')).toBe(1);
    expect(await second.metrics.kvCount('resyncs', 'restart')).toBe(0);
    // Forgotten at the gap: what came before it is unknown (its first block's batch was lost).
    expect(await env.depth('m', 's', old.names)).toBe(0);
  });
});

describe('KV-event stream bounds', { timeout: 60_000 }, () => {
  it('cuts off a publisher sending a frame past kvEventsMaxMessageBytes: the batch is never applied, the rank resynchronised', async () => {
    const pub = await publisher();
    const { metrics } = env.startIndexer('bytes', [stream('b', pub.endpoint, pub.replayEndpoint)], {
      maxBatchBytes: 64 * 1024,
      replayTimeoutMs: 300,
    });
    const chain = tokenChain(44, 2);
    await publishUntil(pub, [blocks(chain, 0, 1)], async () => (await env.depth('m', 'b', chain.names)) === 1);
    // A valid batch (one block) padded past 64 KiB with a field the decoder ignores.
    const padded = { ts: 1, events: [blocks(chain, 1, 2)], data_parallel_rank: null, pad: Buffer.alloc(100_000) };
    await pub.publishPayload(new Packr({ useRecords: false }).pack(padded));
    const marker = tokenChain(45, 1);
    await publishUntil(pub, [blocks(marker, 0, 1)], async () => (await env.depth('m', 'b', marker.names)) === 1);
    await eventually('the replay cut off too, given up', async () => {
      return (await metrics.kvCount('problems', 'replay_timeout')) >= 1;
    });
    expect(await env.depth('m', 'b', chain.names)).toBe(0);
  });

  it('lets go of a stream whose endpoint zeromq refuses (tcp://*:port), counts and reads the others', async () => {
    const pub = await publisher();
    const good = stream('good', pub.endpoint, pub.replayEndpoint);
    const { indexer, metrics } = env.startIndexer('refuse', [stream('star', 'tcp://*:5557', null), good]);
    const chain = tokenChain(46, 1);
    await publishUntil(pub, [blocks(chain, 0, 1)], async () => (await env.depth('m', 'good', chain.names)) === 1);
    await eventually('a few lease rounds', async () => (await metrics.kvCount('problems', 'subscribe_failed')) >= 1);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(indexer.held()).toEqual(['good']);
    expect(await metrics.kvCount('problems', 'subscribe_failed')).toBe(1);
    // Its lease was released: another replica could take it at once.
    expect((await env.leases('other', 60_000).acquire('star')).held).toBe(true);
  });
});

describe('KV-event leases', { timeout: 60_000 }, () => {
  it('releases a lease acquired while close() runs', async () => {
    const pub = await publisher();
    let asked: () => void = () => undefined;
    const acquiring = new Promise<void>((resolve) => {
      asked = resolve;
    });
    let open: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const wrapLeases = (real: KvEventsLeases): KvEventsLeases =>
      Object.assign(Object.create(real) as KvEventsLeases, {
        acquire: async (rankId: string) => {
          asked();
          await gate;
          return real.acquire(rankId);
        },
      });
    const { indexer } = env.startIndexer('closing', [stream('c', pub.endpoint, pub.replayEndpoint)], {
      leaseTtlMs: 60_000,
      wrapLeases,
    });
    await acquiring;
    const closing = indexer.close();
    open();
    await closing;
    expect(indexer.held()).toEqual([]);
    expect((await env.leases('other', 60_000).acquire('c')).held).toBe(true);
  });

  it('writes nothing past the lease it last renewed plus the TTL (a renewal stalled), and catches up after', async () => {
    const pub = await publisher();
    let skewMs = 0;
    let stall: Promise<void> | null = null;
    let resume: () => void = () => undefined;
    const wrapLeases = (real: KvEventsLeases): KvEventsLeases =>
      Object.assign(Object.create(real) as KvEventsLeases, {
        advance: async (rankId: string, seq: bigint | null) => {
          await stall;
          return real.advance(rankId, seq);
        },
      });
    const { metrics } = env.startIndexer('lapse', [stream('l', pub.endpoint, pub.replayEndpoint)], {
      nowMs: () => Date.now() + skewMs,
      wrapLeases,
      // The held-back batch comes back through the replay; one past its timeout resynchronises the rank, after which
      // this test's next batch is an orphan (its parent's name was never learned) and the chain cannot reach 3. The 1 s
      // of the other tests is a bound a busy machine passed once (2026-12-07), and this test is not about it.
      replayTimeoutMs: 15_000,
    });
    const chain = tokenChain(47, 3);
    await publishUntil(pub, [blocks(chain, 0, 1)], async () => (await env.depth('m', 'l', chain.names)) === 1);
    // Renewals stall, and the indexer's clock passes the lease's end.
    stall = new Promise<void>((resolve) => {
      resume = resolve;
    });
    skewMs = 60_000;
    await pub.publish([blocks(chain, 1, 2)]);
    await eventually('the batch held back', async () => (await metrics.kvCount('problems', 'lease_expired')) >= 1);
    expect(await env.depth('m', 'l', chain.names)).toBe(1);
    stall = null;
    resume();
    // Renewed (or lost and taken again from the cursor): the held-back batch is replayed, though no later batch
    // showed the hole (an idle engine), and the next applies after it.
    await eventually('the held-back batch', async () => (await env.depth('m', 'l', chain.names)) === 2);
    await publishUntil(
      pub,
      [blocks(chain, 2, 3)],
      async () => (await env.depth('m', 'l', chain.names)) === 3,
      'the chain to catch up',
    );
  });

  it('skips what a replay brings past a batch it held back, and replays from the cursor once renewed (a renewal landing mid-replay)', async () => {
    const pub = await publisher();
    let skewMs = 0;
    let stall: Promise<void> | null = null;
    let resume: () => void = () => undefined;
    // A renewal asked on the skewed clock came back held, and a later round began: its leaseRenewed has run.
    let renewedSkewed = false;
    let roundAfterRenewal = false;
    const wrapLeases = (real: KvEventsLeases): KvEventsLeases =>
      Object.assign(Object.create(real) as KvEventsLeases, {
        advance: async (rankId: string, seq: bigint | null) => {
          if (renewedSkewed) roundAfterRenewal = true;
          const skewed = skewMs !== 0;
          await stall;
          const state = await real.advance(rankId, seq);
          if (skewed && state.held) renewedSkewed = true;
          return state;
        },
      });
    const { indexer, metrics } = env.startIndexer('midway', [stream('w', pub.endpoint, pub.replayEndpoint)], {
      nowMs: () => Date.now() + skewMs,
      wrapLeases,
      // Long enough that Redis keeps the lease through the stall (this test is about one holder), renewed every second.
      leaseTtlMs: 3000,
      // The replay waits at the pauses below for a renewal round or two: not a replay that does not end.
      replayTimeoutMs: 15_000,
    });
    const chain = tokenChain(48, 3);
    await publishUntil(pub, [blocks(chain, 0, 1)], async () => (await env.depth('m', 'w', chain.names)) === 1);
    await eventually('every copy applied', async () => indexer.subscriptionOf('w')?.lastApplied === pub.nextSeq - 1n);
    // Block 1 misses the live socket: block 2's arrival is a gap, and the replay stops before each of them.
    const held = pub.nextSeq;
    const beforeHeld = pub.pauseReplayAt(held);
    const afterHeld = pub.pauseReplayAt(held + 1n);
    await pub.publish([blocks(chain, 1, 2)], { drop: true });
    await pub.publish([blocks(chain, 2, 3)]);
    await beforeHeld.reached;
    // The lease lapses (renewals stall, the clock passes its end) just as the replay brings block 1: held back.
    stall = new Promise<void>((resolve) => {
      resume = resolve;
    });
    skewMs = 60_000;
    beforeHeld.release();
    await afterHeld.reached;
    await eventually('block 1 held back', async () => (await metrics.kvCount('problems', 'lease_expired')) >= 1);
    // Renewed before the replay goes on with block 2: applying it would step over block 1.
    stall = null;
    resume();
    await eventually('the renewal', async () => roundAfterRenewal);
    expect(await env.depth('m', 'w', chain.names)).toBe(1);
    afterHeld.release();
    await eventually('the chain to catch up', async () => (await env.depth('m', 'w', chain.names)) === 3);
    // Not a publisher whose buffer fell short: the rank was never forgotten.
    expect(await metrics.kvCount('problems', 'replay_short')).toBe(0);
    expect(await metrics.kvCount('resyncs', 'gap')).toBe(0);
    expect(indexer.subscriptionOf('w')?.lastApplied).toBe(held + 1n);
  });
});
