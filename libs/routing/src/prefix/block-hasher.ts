/**
 * Cuts the routing text's UTF-8 bytes into fixed blocks and hashes them as a chain:
 *
 *   hash_0 = H(CHAIN_SEED, block_0),  hash_i = H(hash_{i-1}, block_i)
 *
 * so hash_i identifies the whole prefix blocks 0..i (holding block i implies holding every
 * shallower block), and extending a chain needs only its last hash. H seeds the two 32-bit lanes
 * from the previous 53-bit hash, mixes the block 4 bytes (little-endian) at a time, and finalises
 * with the block length (`hashBytes53`). Only full blocks get hashes: a partial trailing block
 * would change as the conversation grows, so it can never be matched by a later turn.
 *
 * Cost: this runs on every request (10–40 KB bodies, agents' histories of 100 KB and more). The
 * rendering's pieces are encoded natively into one byte buffer kept between calls (`encodeBuffer`),
 * no allocation per block; words are read through a DataView (explicit little-endian, so hashes are
 * equal on every platform). Figures (Node 20) in libs/routing/README.md.
 */

import { Buffer } from 'node:buffer';
import type { BlockHash } from '../types';
import { hashBytes53 } from '../hash/hash53';
import type { RenderedRoutingText } from './routing-text';

/** Seed of every chain (an arbitrary 53-bit constant: changing it re-keys every shared index). */
const CHAIN_SEED = 0x1f_3a5b_7c9d_e0f1;

export interface HashedRoutingText {
  /** Chained hashes of the full blocks, in order. */
  readonly blockHashes: BlockHash[];
  /** UTF-8 length of the routing text, in bytes. */
  readonly textBytes: number;
  /** Full blocks that lie entirely before the last message starts (at most the blocks hashed). */
  readonly contextBlocks: number;
  /** The first block's hash, or (text shorter than one block) a hash of the whole text. */
  readonly headHash: BlockHash;
  /** UTF-8 offsets where the first turn starts and ends (RenderedRoutingText.firstTurnStartOffset); absent without one. */
  readonly firstTurnBytes?: { readonly start: number; readonly end: number } | undefined;
  /** RoutingRequest.boundaryBlocks: the blocks on either side of message boundaries, ascending. */
  readonly boundaryBlocks: readonly number[];
}

/**
 * Message ends whose blocks a request names to the state store (RoutingRequest.boundaryBlocks): the first
 * message's (a system prompt's end, shared by every conversation that has it) and the last few (where an
 * earlier turn of the same conversation ended: a reply and a new message, or a tool call and its result).
 */
const BOUNDARY_LAST_MESSAGES = 4;

/**
 * The blocks on either side of each message end in `endBytes`: the last full block before it (its
 * 1-based position, floor(end / block size)) and the next, within 1..blockCount, ascending, once each.
 */
function boundaryBlocksOf(endBytes: readonly number[], blockSizeBytes: number, blockCount: number): number[] {
  const blocks = new Set<number>();
  for (const end of endBytes) {
    const before = Math.floor(end / blockSizeBytes);
    if (before >= 1 && before <= blockCount) blocks.add(before);
    if (before + 1 >= 1 && before + 1 <= blockCount) blocks.add(before + 1);
  }
  return [...blocks].sort((a, b) => a - b);
}

/** Bytes past the kept blocks worth encoding: a character straddling their end (UTF-8: at most 4 bytes) must not stop the encoder short of it. */
export const STRADDLE_BYTES = 3;

/**
 * How much of the routing text `hashRoutingText` reads for `maxBlocks` blocks, in UTF-16 units (each at
 * least one UTF-8 byte): what the renderer must write, and no more (renderRoutingText's `maxUnits`).
 */
export function routedTextUnits(maxBlocks: number, blockSizeBytes: number): number {
  return maxBlocks * blockSizeBytes + STRADDLE_BYTES;
}

export function assertBlockSize(blockSizeBytes: number): void {
  if (!Number.isInteger(blockSizeBytes) || blockSizeBytes < 1) {
    throw new RangeError(`blockSizeBytes must be a positive integer, got ${blockSizeBytes}`);
  }
}

/** maxBlocks: an integer ≥ 1, or Infinity (no limit). */
export function assertMaxBlocks(maxBlocks: number): void {
  if (!(maxBlocks >= 1) || (Number.isFinite(maxBlocks) && !Number.isInteger(maxBlocks)))
    throw new RangeError(`maxBlocks must be an integer >= 1, got ${maxBlocks}`);
}

/**
 * Encodes, cuts and chain-hashes a rendered routing text. `blockSizeBytes`: integer ≥ 1 (multiples of
 * 4 are fastest). `maxBlocks` (default: no limit): only the first that many blocks are encoded and
 * hashed, so a huge prompt costs a bounded time here and in the state store; `textBytes` is still the
 * whole text's length (prefill estimates need it), `contextBlocks` at most the blocks kept. The same
 * hashes as rendering straight into a `RoutingTextEncoder` (`buildRoutingRequest`, the request path).
 */
export function hashRoutingText(
  rendered: RenderedRoutingText,
  blockSizeBytes: number,
  maxBlocks: number = Number.POSITIVE_INFINITY,
): HashedRoutingText {
  assertBlockSize(blockSizeBytes);
  assertMaxBlocks(maxBlocks);
  const { text, contextEndOffset, firstTurnStartOffset, firstTurnEndOffset } = rendered;
  // A UTF-16 code unit never takes more than 3 UTF-8 bytes (a surrogate pair: 2 units → 4 bytes).
  const encoder = new RoutingTextEncoder(Math.min(text.length * 3, maxBlocks * blockSizeBytes + STRADDLE_BYTES));
  // Encoded in parts to learn the byte offsets of the marks (message edges: never inside a character).
  const marks: { offset: number; mark: () => void }[] = [];
  if (contextEndOffset > 0) marks.push({ offset: contextEndOffset, mark: () => encoder.contextEnds() });
  if (firstTurnStartOffset !== undefined && firstTurnEndOffset !== undefined) {
    marks.push(
      { offset: firstTurnStartOffset, mark: () => encoder.firstTurnEdge('start') },
      { offset: firstTurnEndOffset, mark: () => encoder.firstTurnEdge('end') },
    );
  }
  for (const offset of rendered.messageEndOffsets ?? []) marks.push({ offset, mark: () => encoder.messageEnds() });
  let encodedTo = 0;
  for (const { offset, mark } of marks.sort((a, b) => a.offset - b.offset)) {
    encoder.piece(text.slice(encodedTo, offset), false);
    encodedTo = offset;
    mark();
  }
  encoder.piece(text.slice(encodedTo), false);
  return encoder.hash(blockSizeBytes, maxBlocks, rendered.omittedBytes ?? 0);
}

/**
 * A `RoutingTextSink` that encodes a rendering's pieces as UTF-8 as they come, up to `capacity` bytes
 * (whole characters only), counting the bytes of every piece, kept or not; then `hash` cuts and
 * chain-hashes what it kept. The request path renders straight into one (routing-request.ts), so no
 * string of the whole text is ever built: one of 128 KB or more is a large-object allocation for V8,
 * which made a 128 KB prompt cost ~0.6 ms here (libs/routing/README.md).
 *
 * Pieces that surely fit (3 bytes per unit at most) are written without measuring them first; the
 * format's own ASCII (tags, separators: a few bytes each) is copied byte by byte, cheaper than a native
 * call. The bytes go into a buffer kept between calls (`encodeBuffer`), shared by every encoder: use
 * one at a time, from construction to `hash` (synchronous, as `buildRoutingRequest` and
 * `hashRoutingText` do); a second one alive at the same time would write over the first's bytes.
 */
export class RoutingTextEncoder {
  /** Bytes written. */
  private encodedBytes = 0;
  /** UTF-8 bytes of every piece given, whether or not it was kept. */
  private textBytes = 0;
  /** Bytes before the last message (contextEnds). */
  private contextBytes = 0;
  /** Bytes before the first turn and to its end (firstTurnEdge); -1 = not marked. */
  private firstTurnStartBytes = -1;
  private firstTurnEndBytes = -1;
  /** Bytes to the end of the first message, and of the last BOUNDARY_LAST_MESSAGES after it (messageEnds). */
  private readonly messageEndBytes: number[] = [];
  private full = false;
  private bytes: Buffer;

  /** `capacity`: most bytes kept (the blocks hashed, plus STRADDLE_BYTES). */
  constructor(private readonly capacity: number) {
    this.bytes = encodeBuffer(Math.min(capacity, INITIAL_BUFFER_BYTES));
  }

  piece(text: string, ascii: boolean): void {
    const room = this.capacity - this.encodedBytes;
    if (!this.full && text.length * 3 <= room) {
      if (this.bytes.length - this.encodedBytes < text.length * 3) this.grow(this.encodedBytes + text.length * 3);
      const written = ascii ? this.copyAscii(text) : this.bytes.write(text, this.encodedBytes, 'utf8');
      this.encodedBytes += written;
      this.textBytes += written;
      return;
    }
    const pieceBytes = ascii ? text.length : Buffer.byteLength(text, 'utf8');
    this.textBytes += pieceBytes;
    if (this.full) return;
    if (this.bytes.length < this.capacity) this.grow(this.capacity);
    this.encodedBytes += this.bytes.write(text, this.encodedBytes, room, 'utf8');
    if (pieceBytes > room) this.full = true;
  }

  contextEnds(): void {
    this.contextBytes = this.textBytes;
  }

  firstTurnEdge(edge: 'start' | 'end'): void {
    if (edge === 'start') this.firstTurnStartBytes = this.textBytes;
    else this.firstTurnEndBytes = this.textBytes;
  }

  messageEnds(): void {
    const ends = this.messageEndBytes;
    // The first message's end stays at [0]; of the later ones, the last BOUNDARY_LAST_MESSAGES.
    if (ends.length > BOUNDARY_LAST_MESSAGES) ends.splice(1, 1);
    ends.push(this.textBytes);
  }

  /** Cuts what was kept into blocks and chain-hashes them; `omittedBytes`: UTF-8 bytes of the text never given (the renderer's count). */
  hash(blockSizeBytes: number, maxBlocks: number, omittedBytes: number): HashedRoutingText {
    const { bytes, encodedBytes } = this;
    const view = new DataView(bytes.buffer, bytes.byteOffset, encodedBytes);
    const blockCount = Math.min(Math.floor(encodedBytes / blockSizeBytes), maxBlocks);
    const blockHashes = new Array<BlockHash>(blockCount);
    let previous = CHAIN_SEED;
    for (let block = 0, start = 0; block < blockCount; block++, start += blockSizeBytes) {
      previous = hashBytes53(view, start, blockSizeBytes, previous);
      blockHashes[block] = previous;
    }
    const headHash = blockHashes[0] ?? hashBytes53(view, 0, encodedBytes, CHAIN_SEED);
    // One object, one shape whether or not the text has a first turn (this runs for every request).
    const firstTurnBytes =
      this.firstTurnStartBytes < 0 || this.firstTurnEndBytes < 0
        ? undefined
        : { start: this.firstTurnStartBytes, end: this.firstTurnEndBytes };
    return {
      blockHashes,
      textBytes: this.textBytes + omittedBytes,
      contextBlocks: Math.min(Math.floor(this.contextBytes / blockSizeBytes), blockCount),
      headHash,
      firstTurnBytes,
      boundaryBlocks: boundaryBlocksOf(this.messageEndBytes, blockSizeBytes, blockCount),
    };
  }

  private copyAscii(text: string): number {
    const { bytes } = this;
    let at = this.encodedBytes;
    for (let index = 0; index < text.length; index++) bytes[at++] = text.charCodeAt(index);
    return text.length;
  }

  /** A buffer of at least `bytes` (at most `capacity`), with what was written so far. */
  private grow(bytes: number): void {
    const larger = encodeBuffer(Math.min(this.capacity, Math.max(bytes, 2 * this.bytes.length)));
    if (larger !== this.bytes) this.bytes.copy(larger, 0, 0, this.encodedBytes);
    this.bytes = larger;
  }
}

/** Encode buffers up to this size are kept for the next call; a larger one (no block cap, a test) is the call's own. */
const KEPT_BUFFER_BYTES = 1024 * 1024;
const INITIAL_BUFFER_BYTES = 64 * 1024;
let keptBuffer: Buffer | null = null;

/**
 * A buffer of at least `bytes` to encode into. One is kept and reused by every call: a fresh one per request cost more than hashing it
 * (its pages are new to the process each time, and the garbage collector tracks each). Safe to share:
 * hashing is synchronous, nothing keeps the bytes past the call, and they are written before they are
 * read (uninitialised memory is fine for the same reason).
 */
function encodeBuffer(bytes: number): Buffer {
  if (bytes > KEPT_BUFFER_BYTES) return Buffer.allocUnsafeSlow(bytes);
  if (keptBuffer === null || keptBuffer.length < bytes)
    keptBuffer = Buffer.allocUnsafeSlow(Math.min(KEPT_BUFFER_BYTES, Math.max(bytes, 2 * (keptBuffer?.length ?? 0))));
  return keptBuffer;
}
