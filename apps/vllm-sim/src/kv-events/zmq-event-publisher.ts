import type * as Zeromq from 'zeromq';
import type { Publisher, Router } from 'zeromq';

/**
 * The zeromq package, loaded by the caller only when KV events are on (`await import('zeromq')`): its
 * native addon is outside the app bundles (tools/build.ts), so a sim without events never loads it.
 */
export type ZeromqModule = typeof Zeromq;

export interface ZmqEventPublisherOptions {
  readonly zmq: ZeromqModule;
  /** Address to bind on (the sim's --host), e.g. `127.0.0.2`, `0.0.0.0`, `::`. */
  readonly host: string;
  /** PUB port, already offset by the data-parallel rank. */
  readonly port: number;
  /** ROUTER replay port, already offset by the rank; null: no replay socket (vLLM's default). */
  readonly replayPort: number | null;
  readonly topic: string;
  /** Batches kept for replay (vLLM `buffer_steps`). */
  readonly bufferSteps: number;
  /** PUB high-water mark in messages (vLLM `hwm`); beyond it ZMQ drops for slow subscribers. */
  readonly hwm: number;
  /** Batches waiting to be written to the socket before new ones are dropped (vLLM `max_queue_size`). */
  readonly maxQueueSize: number;
}

/** vLLM's END_SEQ: `(-1).to_bytes(8, "big", signed=True)`. */
const END_SEQ = Buffer.alloc(8, 0xff);

/**
 * vLLM's ZmqEventPublisher (`vllm/distributed/kv_events.py`), one per data-parallel rank:
 * - PUB frames `[topic utf-8, seq as 8 bytes big-endian (from 0), msgpack EventBatch]`;
 * - every batch is kept (seq, payload) in a ring of `bufferSteps` for replay;
 * - ROUTER replay: a request `[identity, "", start seq big-endian]` (a DEALER sends `["", start]`) is
 *   answered with `[identity, "", seq, payload]` for each buffered seq ≥ start, then
 *   `[identity, "", END_SEQ (0xff × 8), ""]`; a request of another shape is ignored.
 * The seq is assigned and the batch buffered when it is published, so a batch the socket queue drops
 * (over `maxQueueSize`) still exists for replay: subscribers see a gap in seq and can replay it. vLLM
 * blocks its engine on a full queue instead.
 */
export class ZmqEventPublisher {
  private readonly pub: Publisher;
  private readonly replay: Router | null;
  private readonly topic: Buffer;
  private readonly ring: Array<[seq: number, payload: Buffer] | undefined>;
  private ringStart = 0;
  private ringLength = 0;
  private nextSeq = 0;
  private readonly sendQueue: Buffer[][] = [];
  private sending = false;
  private closed = false;
  /** Batches not written to the PUB socket because its queue was full (they stay replayable). */
  dropped = 0;

  constructor(private readonly options: ZmqEventPublisherOptions) {
    const ipv6 = options.host.includes(':');
    this.pub = new options.zmq.Publisher({ sendHighWaterMark: options.hwm, linger: 0, ipv6 });
    this.replay = options.replayPort === null ? null : new options.zmq.Router({ linger: 0, ipv6 });
    this.topic = Buffer.from(options.topic, 'utf8');
    this.ring = new Array(options.bufferSteps);
  }

  get endpoint(): string {
    return tcpEndpoint(this.options.host, this.options.port);
  }

  /** Binds both sockets; rejects (address in use…) so the sim fails at start, as vLLM does. */
  async bind(): Promise<void> {
    await this.pub.bind(this.endpoint);
    if (this.replay && this.options.replayPort !== null) {
      await this.replay.bind(tcpEndpoint(this.options.host, this.options.replayPort));
      void this.serveReplay(this.replay);
    }
  }

  /** Sequence number the next batch will get (batches published so far). */
  get published(): number {
    return this.nextSeq;
  }

  publish(payload: Buffer): void {
    if (this.closed) return;
    const seq = this.nextSeq++;
    this.remember(seq, payload);
    if (this.sendQueue.length >= this.options.maxQueueSize) {
      this.dropped++;
      return;
    }
    this.sendQueue.push([this.topic, seqBytes(seq), payload]);
    if (!this.sending) void this.drain();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.sendQueue.length = 0;
    this.pub.close();
    this.replay?.close();
  }

  private remember(seq: number, payload: Buffer): void {
    const capacity = this.ring.length;
    if (capacity === 0) return;
    if (this.ringLength < capacity) {
      this.ring[(this.ringStart + this.ringLength) % capacity] = [seq, payload];
      this.ringLength++;
    } else {
      this.ring[this.ringStart] = [seq, payload];
      this.ringStart = (this.ringStart + 1) % capacity;
    }
  }

  /** One send at a time (zeromq.js refuses overlapping sends); PUB never blocks, it drops at the HWM. */
  private async drain(): Promise<void> {
    this.sending = true;
    try {
      while (!this.closed && this.sendQueue.length > 0) await this.pub.send(this.sendQueue.shift() as Buffer[]);
    } catch {
      // The socket closed under us (shutdown).
    } finally {
      this.sending = false;
    }
  }

  private async serveReplay(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        if (frames.length !== 3) continue;
        const [identity, , startBytes] = frames as [Buffer, Buffer, Buffer];
        // vLLM sends the start as 8 bytes; a longer frame would cost a bigint step per byte: not a request.
        if (startBytes.length > 8) continue;
        const start = readUnsignedBigEndian(startBytes);
        const capacity = this.ring.length;
        // Snapshot first: batches published while replaying are for the PUB stream.
        const batches: Array<[number, Buffer]> = [];
        for (let i = 0; i < this.ringLength; i++) {
          const entry = this.ring[(this.ringStart + i) % capacity] as [number, Buffer];
          if (BigInt(entry[0]) >= start) batches.push(entry);
        }
        for (const [seq, payload] of batches) await router.send([identity, '', seqBytes(seq), payload]);
        await router.send([identity, '', END_SEQ, '']);
      }
    } catch {
      // Closed at shutdown.
    }
  }
}

export function tcpEndpoint(host: string, port: number): string {
  const address = host === 'localhost' ? '127.0.0.1' : host;
  return address.includes(':') ? `tcp://[${address}]:${port}` : `tcp://${address}:${port}`;
}

function seqBytes(seq: number): Buffer {
  const bytes = Buffer.alloc(8);
  bytes.writeBigUInt64BE(BigInt(seq));
  return bytes;
}

/** Python's `int.from_bytes(b, "big")`: any length. */
function readUnsignedBigEndian(bytes: Buffer): bigint {
  let value = 0n;
  for (const byte of bytes) value = (value << 8n) | BigInt(byte);
  return value;
}
