import { createHash } from 'node:crypto';
import { Unpackr } from 'msgpackr';
import { Dealer, Subscriber } from 'zeromq';
import type { SimConfig } from '../src/config';
import { startTestSim, type TestSim } from './start-test-sim';

/**
 * The CBOR bytes of vLLM's `(parent, tuple(tokens), extra_keys)` written out by hand (RFC 8949 major types:
 * array 4, byte string 2, unsigned int 0, text 3, null 0xf6), independent of the sim's cborg encoding.
 */
export function handCborBlockTuple(parent: Uint8Array, tokens: readonly number[], extraText: string | null): Buffer {
  const parts: number[] = [0x83, 0x58, 0x20, ...parent];
  parts.push(0x80 + tokens.length); // an array of at most 23 items
  for (const token of tokens) {
    if (token < 24) parts.push(token);
    else if (token < 256) parts.push(0x18, token);
    else if (token < 65_536) parts.push(0x19, token >> 8, token & 0xff);
    else parts.push(0x1a, (token >>> 24) & 0xff, (token >>> 16) & 0xff, (token >>> 8) & 0xff, token & 0xff);
  }
  if (extraText === null) parts.push(0xf6);
  else parts.push(0x81, 0x60 + extraText.length, ...Buffer.from(extraText, 'utf8'));
  return Buffer.from(parts);
}

export const sha256 = (bytes: Uint8Array): Buffer => createHash('sha256').update(bytes).digest();

/** NONE_HASH for PYTHONHASHSEED = `seed` (a short ASCII string): SHA-256 of CBOR text `0x60+len, bytes`. */
export function handNoneHash(seed: string): Buffer {
  return sha256(Buffer.from([0x60 + seed.length, ...Buffer.from(seed, 'ascii')]));
}

/** vLLM's digests of the full blocks of `tokens`, chained from NONE_HASH, salted on block 0. */
export function handBlockDigests(seed: string, tokens: readonly number[], salt: string | null = null): Buffer[] {
  const digests: Buffer[] = [];
  let parent = handNoneHash(seed);
  for (let start = 0; start + 16 <= tokens.length; start += 16) {
    parent = sha256(handCborBlockTuple(parent, tokens.slice(start, start + 16), start === 0 ? salt : null));
    digests.push(parent);
  }
  return digests;
}

export const lastEightBytes = (digest: Buffer): bigint => digest.readBigUInt64BE(24);

export const unpackr = new Unpackr({ useRecords: false, int64AsType: 'bigint' });

export interface ReceivedBatch {
  readonly topic: string;
  readonly seq: bigint;
  readonly payload: Buffer;
  /** `[ts, events, data_parallel_rank]` */
  readonly batch: [number, any[], number];
}

/** A zeromq SUB socket collecting every message of one publisher. */
export class EventSubscriber {
  readonly received: ReceivedBatch[] = [];
  private readonly socket = new Subscriber({ linger: 0 });

  constructor(host: string, port: number, topic = '') {
    this.socket.connect(`tcp://${host}:${port}`);
    this.socket.subscribe(topic);
    void this.collect();
  }

  get events(): Array<{ rank: number; seq: bigint; event: any }> {
    return this.received.flatMap(({ batch, seq }) => batch[1].map((event) => ({ rank: batch[2], seq, event })));
  }

  async waitFor(predicate: (received: readonly ReceivedBatch[]) => boolean, timeoutMs = 4_000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (!predicate(this.received)) {
      if (performance.now() > deadline) throw new Error(`no matching KV events within ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  close(): void {
    this.socket.close();
  }

  private async collect(): Promise<void> {
    try {
      for await (const [topic, seq, payload] of this.socket) {
        const body = payload as Buffer;
        this.received.push({
          topic: (topic as Buffer).toString('utf8'),
          seq: (seq as Buffer).readBigUInt64BE(0),
          payload: body,
          batch: unpackr.unpack(body),
        });
      }
    } catch {
      // closed
    }
  }
}

/** Asks a replay ROUTER for every buffered batch from `start` on, as a DEALER; ends at the END_SEQ marker. */
export async function replayFrom(host: string, port: number, start: bigint): Promise<Array<[bigint, Buffer]>> {
  const dealer = new Dealer({ linger: 0, receiveTimeout: 4_000 });
  dealer.connect(`tcp://${host}:${port}`);
  const startBytes = Buffer.alloc(8);
  startBytes.writeBigUInt64BE(start);
  await dealer.send(['', startBytes]);
  const batches: Array<[bigint, Buffer]> = [];
  try {
    for (;;) {
      const [, seq, payload] = (await dealer.receive()) as Buffer[];
      if ((seq as Buffer).equals(Buffer.alloc(8, 0xff))) return batches;
      batches.push([(seq as Buffer).readBigUInt64BE(0), payload as Buffer]);
    }
  } finally {
    dealer.close();
  }
}

/** A test sim publishing KV events on a free port range (retried on "address in use"), PYTHONHASHSEED "42". */
export async function startEventSim(overrides: Partial<SimConfig> = {}): Promise<TestSim & { port: number }> {
  for (let attempt = 0; ; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 30_000);
    try {
      const sim = await startTestSim({ kvEventsPort: port, pythonHashSeed: '42', timeScale: 20, ...overrides });
      return { ...sim, port };
    } catch (error) {
      if (attempt >= 10 || !/in use/i.test(String(error))) throw error;
    }
  }
}

/** Lets a fresh SUB socket's subscription reach the publisher (ZMQ's slow joiner) before traffic starts. */
export const settle = (ms = 200) => new Promise((resolve) => setTimeout(resolve, ms));
