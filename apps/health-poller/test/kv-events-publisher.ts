import { Packr } from 'msgpackr';
import { Publisher, Router } from 'zeromq';

/**
 * A tiny vLLM KV-event publisher for the indexer's tests, speaking ZmqEventPublisher's wire format
 * (vllm/distributed/kv_events.py): PUB frames `[topic, seq u64 BE, msgpack EventBatch]`, a ROUTER
 * replay socket answering `[identity, '', start seq]` with every buffered batch from there as
 * `[identity, '', seq, payload]`, then `[identity, '', END_SEQ, '']`. Written for these tests (the
 * vllm-sim has its own); `drop` keeps a batch out of the PUB stream but in the replay buffer, as a
 * subscriber that missed it would see.
 */
export class TestKvPublisher {
  private pub: Publisher | null = null;
  private router: Router | null = null;
  private seq = 0n;
  private buffer: { seq: bigint; payload: Buffer }[] = [];
  private sending: Promise<void> = Promise.resolve();
  /** Replays wait before sending these batches until released (pauseReplayAt). */
  private readonly pauses = new Map<bigint, { reached: () => void; released: Promise<void> }>();
  private readonly packr = new Packr({ useRecords: false });

  private constructor(
    private pubPort: number,
    private replayPort: number,
  ) {}

  /** Binds on 127.0.0.1 (random ports unless given). */
  static async open(rank: number | null = null): Promise<TestKvPublisher> {
    const publisher = new TestKvPublisher(0, 0);
    publisher.rank = rank;
    await publisher.bind();
    return publisher;
  }

  rank: number | null = null;

  get endpoint(): string {
    return `tcp://127.0.0.1:${this.pubPort}`;
  }

  get replayEndpoint(): string {
    return `tcp://127.0.0.1:${this.replayPort}`;
  }

  /** The next sequence number. */
  get nextSeq(): bigint {
    return this.seq;
  }

  private async bind(): Promise<void> {
    this.pub = new Publisher({ linger: 0 });
    this.router = new Router({ linger: 0 });
    await retryBind(() => (this.pub as Publisher).bind(`tcp://127.0.0.1:${this.pubPort || '*'}`));
    await retryBind(() => (this.router as Router).bind(`tcp://127.0.0.1:${this.replayPort || '*'}`));
    this.pubPort = portOf(this.pub.lastEndpoint);
    this.replayPort = portOf(this.router.lastEndpoint);
    void this.serveReplays(this.router);
  }

  private async serveReplays(router: Router): Promise<void> {
    try {
      for await (const [identity, , start] of router) {
        const from = Buffer.from(start as Buffer).readBigUInt64BE(0);
        for (const { seq, payload } of this.buffer) {
          if (seq < from) continue;
          const pause = this.pauses.get(seq);
          if (pause !== undefined) {
            pause.reached();
            await pause.released;
          }
          await router.send([identity as Buffer, Buffer.alloc(0), seqFrame(seq), payload]);
        }
        await router.send([identity as Buffer, Buffer.alloc(0), seqFrame(0xffff_ffff_ffff_ffffn), Buffer.alloc(0)]);
      }
    } catch {
      // closed
    }
  }

  /** Publishes one batch (`[ts, events, rank]`, or a map with `encoding: 'map'`); returns its sequence number. */
  publish(events: unknown[], options: { drop?: boolean; encoding?: 'array' | 'map' } = {}): Promise<bigint> {
    const ts = Date.now() / 1000;
    const batch =
      options.encoding === 'map'
        ? { ts, events, data_parallel_rank: this.rank }
        : this.rank === null
          ? [ts, events]
          : [ts, events, this.rank];
    return this.publishPayload(this.packr.pack(batch), options.drop ?? false);
  }

  /** Publishes any payload under the next sequence number (malformed input). */
  publishPayload(payload: Buffer, drop = false): Promise<bigint> {
    const seq = this.seq;
    this.seq += 1n;
    this.buffer.push({ seq, payload });
    if (!drop) this.send([Buffer.alloc(0), seqFrame(seq), payload]);
    return this.sending.then(() => seq);
  }

  /** Sends raw frames on the PUB socket (no sequence number used). */
  send(frames: Buffer[]): Promise<void> {
    this.sending = this.sending.then(() => (this.pub as Publisher).send(frames));
    return this.sending;
  }

  /**
   * Replays stop before sending batch `seq` (a slow replay socket) until `release()`; `reached` resolves when one
   * does, so a test can act between two batches of one replay.
   */
  pauseReplayAt(seq: bigint): { reached: Promise<void>; release: () => void } {
    let reached: () => void = () => undefined;
    let release: () => void = () => undefined;
    const arrived = new Promise<void>((resolve) => {
      reached = resolve;
    });
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    this.pauses.set(seq, { reached, released });
    return {
      reached: arrived,
      release: () => {
        this.pauses.delete(seq);
        release();
      },
    };
  }

  /** Keeps only the newest `count` batches for replays (vLLM's ring buffer after it wrapped). */
  trim(count: number): void {
    this.buffer = this.buffer.slice(-count);
  }

  /** A restarted engine: same ports, sequence numbers from 0, an empty replay buffer. */
  async restart(): Promise<void> {
    await this.sending;
    this.pub?.close();
    this.router?.close();
    this.seq = 0n;
    this.buffer = [];
    await this.bind();
  }

  async close(): Promise<void> {
    await this.sending.catch(() => undefined);
    this.pub?.close();
    this.router?.close();
  }
}

export function seqFrame(seq: bigint): Buffer {
  const frame = Buffer.alloc(8);
  frame.writeBigUInt64BE(seq);
  return frame;
}

function portOf(endpoint: string | null): number {
  return Number(endpoint?.slice(endpoint.lastIndexOf(':') + 1));
}

async function retryBind(bind: () => Promise<void>): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await bind();
    } catch (error) {
      if (attempt >= 50) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

/** vLLM's positional BlockStored: `["BlockStored", hashes, parent, token_ids, block_size, lora_id, medium, lora_name]`. */
export function blockStored(
  hashes: readonly (bigint | number | Uint8Array)[],
  parent: bigint | number | Uint8Array | null,
  tokens: readonly number[],
  blockSize: number,
  loraName: string | null = null,
): unknown[] {
  const event: unknown[] = ['BlockStored', hashes, parent, tokens, blockSize, null, 'GPU'];
  if (loraName !== null) event.push(loraName);
  return event;
}

/** The same as a map with `type` (vLLM after #42892), with a field this indexer does not know. */
export function blockStoredMap(
  hashes: readonly (bigint | number | Uint8Array)[],
  parent: bigint | number | Uint8Array | null,
  tokens: readonly number[],
  blockSize: number,
): Record<string, unknown> {
  return {
    type: 'BlockStored',
    block_hashes: hashes,
    parent_block_hash: parent,
    token_ids: tokens,
    block_size: blockSize,
    lora_id: null,
    medium: 'GPU',
    lora_name: null,
    session_id: 'conversation-7',
  };
}

export function blockRemoved(hashes: readonly (bigint | number | Uint8Array)[]): unknown[] {
  return ['BlockRemoved', hashes, 'GPU'];
}

export const allBlocksCleared = ['AllBlocksCleared'];
