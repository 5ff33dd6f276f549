import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EventSubscriber,
  handBlockDigests,
  handCborBlockTuple,
  lastEightBytes,
  replayFrom,
  settle,
  sha256,
  startEventSim,
} from './kv-events-support';
import { postJson, type TestSim } from './start-test-sim';

const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

/** The block hashes the cache holds now, per /debug/kv-cache (rank 0). */
async function cachedHashes(url: string): Promise<string[]> {
  const debug: any = await (await fetch(`${url}/debug/kv-cache`)).json();
  return debug.ranks[0].blocks.map((block: { block_hash: string }) => block.block_hash).sort();
}

/** Applies BlockStored / BlockRemoved / AllBlocksCleared in order: the hashes an indexer would hold. */
function indexFromEvents(events: ReadonlyArray<{ event: any }>): string[] {
  const held = new Set<string>();
  for (const { event } of events) {
    if (event.type === 'BlockStored') for (const hash of event.block_hashes) held.add(String(hash));
    else if (event.type === 'BlockRemoved') for (const hash of event.block_hashes) held.delete(String(hash));
    else if (event.type === 'AllBlocksCleared') held.clear();
  }
  return [...held].sort();
}

describe('vllm-sim KV events: map encoding, uint64 hashes, small KV cache', () => {
  let sim: TestSim & { port: number };
  let subscriber: EventSubscriber;
  // 11 usable blocks: three 4-block prompts cannot all stay cached.
  beforeAll(async () => {
    sim = await startEventSim({ numGpuBlocks: 12, kvEventsSessionId: true });
    subscriber = new EventSubscriber('127.0.0.1', sim.port);
    await settle();
  });
  afterAll(async () => {
    subscriber.close();
    await sim.close();
  });
  const published = () => sim.sim.kvEvents?.[0]?.publisher.published ?? 0;
  const allReceived = () => subscriber.waitFor((received) => received.length === published());

  it('publishes BlockStored with vLLM sha256_cbor hashes, chained parents and the blocks token ids', async () => {
    const prompt = range(1000, 40);
    const done = await postJson(sim.url, '/v1/completions', { prompt, max_tokens: 10 });
    expect(done.status).toBe(200);
    await allReceived();
    const stored = subscriber.events.filter(({ event }) => event.type === 'BlockStored').map(({ event }) => event);
    const [first, second] = stored;
    const digests = handBlockDigests('42', prompt);
    expect(first).toMatchObject({
      type: 'BlockStored',
      block_hashes: digests.map(lastEightBytes),
      parent_block_hash: null,
      token_ids: prompt.slice(0, 32),
      block_size: 16,
      lora_id: null,
      medium: 'GPU',
      lora_name: null,
      extra_keys: [null, null],
      group_idx: 0,
      kv_cache_spec_kind: 'full_attention',
    });
    expect(first.session_id).toMatch(/^cmpl-/);
    // Block 3 fills during decoding: 8 prompt tokens and 8 generated ones, chained on block 2.
    expect(second.parent_block_hash).toBe(lastEightBytes(digests[1] as Buffer));
    expect(second.token_ids.slice(0, 8)).toEqual(prompt.slice(32));
    const third = sha256(handCborBlockTuple(digests[1] as Buffer, second.token_ids, null));
    expect(second.block_hashes).toEqual([lastEightBytes(third)]);
    // Sequence numbers from 0 without a gap; the batch is [ts float, events, rank 0].
    expect(subscriber.received.map(({ seq }) => seq)).toEqual(range(0, published()).map(BigInt));
    for (const { batch, topic } of subscriber.received) {
      expect(topic).toBe('');
      expect(batch[2]).toBe(0);
      expect(Math.abs(batch[0] - Date.now() / 1000)).toBeLessThan(60);
    }
    expect(await cachedHashes(sim.url)).toEqual(indexFromEvents(subscriber.events));
  });

  it('publishes BlockRemoved as the LRU evicts, and the index stays equal to the cache block by block', async () => {
    for (let prompt = 0; prompt < 4; prompt++) {
      const done = await postJson(sim.url, '/v1/completions', {
        prompt: range(2000 + prompt * 100, 64),
        max_tokens: 1,
      });
      expect(done.status).toBe(200);
    }
    await allReceived();
    const removed = subscriber.events.filter(({ event }) => event.type === 'BlockRemoved').map(({ event }) => event);
    expect(removed.length).toBeGreaterThanOrEqual(4);
    const everStored = new Set(
      subscriber.events.flatMap(({ event }) => (event.type === 'BlockStored' ? event.block_hashes : [])),
    );
    for (const event of removed) {
      expect(event).toMatchObject({ medium: 'GPU', group_idx: 0 });
      expect(event.block_hashes).toHaveLength(1);
      expect(everStored.has(event.block_hashes[0])).toBe(true);
    }
    const held = await cachedHashes(sim.url);
    expect(held.length).toBeLessThanOrEqual(11);
    expect(held).toEqual(indexFromEvents(subscriber.events));
    const debug: any = await (await fetch(`${sim.url}/debug/kv-cache`)).json();
    for (const block of debug.ranks[0].blocks) expect(block.token_ids).toHaveLength(16);
  });

  it('replays buffered batches from a start sequence number, then the end marker', async () => {
    const total = published();
    expect(total).toBeGreaterThan(3);
    const replayed = await replayFrom('127.0.0.1', sim.port + 1, 2n);
    expect(replayed.map(([seq]) => seq)).toEqual(range(2, total - 2).map(BigInt));
    for (const [seq, payload] of replayed)
      expect(payload.equals(subscriber.received[Number(seq)]?.payload as Buffer)).toBe(true);
    expect(await replayFrom('127.0.0.1', sim.port + 1, BigInt(total + 5))).toEqual([]);
  });

  it('publishes AllBlocksCleared when the prefix cache is reset (POST /reset_prefix_cache)', async () => {
    const before = published();
    const response = await fetch(`${sim.url}/reset_prefix_cache`, { method: 'POST' });
    expect(response.status).toBe(200);
    expect(await response.text()).toBe('');
    await allReceived();
    expect(published()).toBe(before + 1);
    expect(subscriber.received.at(-1)?.batch[1]).toEqual([{ type: 'AllBlocksCleared' }]);
    expect(await cachedHashes(sim.url)).toEqual([]);
  });
});

describe('vllm-sim KV events: tagged arrays, 32-byte hashes, a topic, cache_salt', () => {
  let sim: TestSim & { port: number };
  let subscriber: EventSubscriber;
  beforeAll(async () => {
    sim = await startEventSim({
      kvEventsEncoding: 'array',
      kvEventsBlockHashes: 'bytes',
      kvEventsTopic: 'kv@sim',
      kvEventsBufferSteps: 2,
    });
    subscriber = new EventSubscriber('127.0.0.1', sim.port, 'kv@');
    await settle();
  });
  afterAll(async () => {
    subscriber.close();
    await sim.close();
  });

  it('encodes BlockStored positionally with bin hashes, salted on block 0 as vLLM extra keys', async () => {
    const prompt = range(500, 33);
    const done = await postJson(sim.url, '/v1/completions', { prompt, max_tokens: 1, cache_salt: 'tenant-a' });
    expect(done.status).toBe(200);
    await subscriber.waitFor((received) => received.length > 0);
    const { topic, batch } = subscriber.received[0] as (typeof subscriber.received)[number];
    expect(topic).toBe('kv@sim');
    const [tag, hashes, parent, tokens, blockSize, loraId, medium, ...rest] = batch[1][0];
    expect([tag, parent, blockSize, loraId, medium, rest]).toEqual(['BlockStored', null, 16, null, 'GPU', []]);
    expect(tokens).toEqual(prompt.slice(0, 32));
    expect(hashes.map((hash: Uint8Array) => Buffer.from(hash))).toEqual(handBlockDigests('42', prompt, 'tenant-a'));
    // The salt changes every hash of the chain: an unsalted prompt shares none of them.
    expect(Buffer.from(hashes[1]).equals(handBlockDigests('42', prompt)[1] as Buffer)).toBe(false);
    const debug: any = await (await fetch(`${sim.url}/debug/kv-cache`)).json();
    expect(debug.ranks[0].blocks.map((block: { block_hash: string }) => block.block_hash).sort()).toEqual(
      hashes.map((hash: Uint8Array) => Buffer.from(hash).toString('hex')).sort(),
    );
  });

  it('keeps only the last --kv-events-buffer-steps batches for replay', async () => {
    for (let i = 0; i < 3; i++)
      await postJson(sim.url, '/v1/completions', { prompt: range(7000 + i * 50, 20), max_tokens: 1 });
    const total = sim.sim.kvEvents?.[0]?.publisher.published ?? 0;
    expect(total).toBeGreaterThanOrEqual(4);
    const replayed = await replayFrom('127.0.0.1', sim.port + 1, 0n);
    expect(replayed.map(([seq]) => seq)).toEqual([BigInt(total - 2), BigInt(total - 1)]);
  });
});

describe('vllm-sim KV events bound on --host', () => {
  it('lets two sims on 127.0.0.2 and 127.0.0.3 publish on the same port, as pods do', async () => {
    const first = await startEventSim({ host: '127.0.0.2' });
    const second = await startEventSim({ host: '127.0.0.3', kvEventsPort: first.port });
    const subscribers = [new EventSubscriber('127.0.0.2', first.port), new EventSubscriber('127.0.0.3', first.port)];
    try {
      await settle();
      await postJson(first.url, '/v1/completions', { prompt: range(1, 32), max_tokens: 1 });
      await postJson(second.url, '/v1/completions', { prompt: range(2, 48), max_tokens: 1 });
      await (subscribers[0] as EventSubscriber).waitFor((received) => received.length > 0);
      await (subscribers[1] as EventSubscriber).waitFor((received) => received.length > 0);
      const firstStored = (subscribers[0] as EventSubscriber).events[0]?.event;
      const secondStored = (subscribers[1] as EventSubscriber).events[0]?.event;
      expect(firstStored.token_ids).toEqual(range(1, 32));
      expect(secondStored.token_ids).toEqual(range(2, 48));
    } finally {
      for (const subscriber of subscribers) subscriber.close();
      await first.close();
      await second.close();
    }
  });
});
