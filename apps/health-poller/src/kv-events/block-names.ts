import { hashTokenBlock53, TOKEN_CHAIN_ROOT, tokenBlockExtra, type BlockHash } from '@kvroute/routing';
import type { EngineHash, StoredEvent } from './wire';

/** What one engine block is to the router: its name, and its parent's engine hash (null = a chain's first). */
interface NamedBlock {
  readonly name: BlockHash;
  readonly parent: EngineHash | null;
  /** The LoRA adapter it was stored for (BlockRemoved does not say: its pool is found here). */
  readonly loraName: string | null;
  /** Copies of the block the engine caches (stored minus removed), counted in `epoch`; another epoch = 0. */
  copies: number;
  epoch: number;
}

/** A stored event in router names: the blocks, after the parent's name (null = they start a chain). */
export interface NamedStore {
  readonly anchor: BlockHash | null;
  readonly blocks: BlockHash[];
  /** The engine hash of the last block (to rebuild the whole chain when the index lost the anchor). */
  readonly last: EngineHash;
  /** The pool the blocks belong in: the LoRA adapter's name, null = the backend's model. */
  readonly loraName: string | null;
}

/**
 * One backend rank's engine hash → router block name map. The router names a block of token ids
 * with hashTokenBlock53 chained on the previous block's name from TOKEN_CHAIN_ROOT; a BlockStored
 * event carries each block's token ids and its parent's engine hash, so a block's name follows from
 * its parent's, and BlockRemoved (engine hashes only) maps back through here.
 *
 * Extra keys (libs/routing tokenBlockExtra, as the router folds them): a LoRA adapter's name on every
 * block, the `cache_salt` of a chain's first block; multimodal identifiers and prompt embeds are not
 * folded (a request with them is routed in byte mode).
 *
 * Copies: vLLM caches a block twice when a request whose prompt hits the cache whole recomputes its
 * last block (a second block under the same hash, its own BlockStored), and evicting either copy sends
 * a BlockRemoved while the other stays cached. The map counts the copies the stream stored and removed
 * (`release`), so the index drops a block only with its last copy; a clear or resync (`forgetCopies`)
 * starts the counts again.
 *
 * Bounded: at most `capacity` blocks, least recently stored or used as a parent first out (a Map in
 * insertion order; a block seen again moves to the end). A block whose parent is not known (the map
 * lost it, or the indexer started after the parent was stored and no replay reached back to it)
 * cannot be named: it and its descendants are skipped ("orphans", counted) until the engine stores
 * the chain again from a known block (it recomputes an evicted prefix, or reports reused blocks with
 * `kv_cache_report_mode: "full"`).
 */
export class BlockNames {
  private readonly blocks = new Map<EngineHash, NamedBlock>();
  private epoch = 0;

  constructor(
    readonly capacity: number,
    /** The longest chain rebuilt from the map (nameChain), in blocks. */
    private readonly maxChainBlocks = 16_384,
  ) {}

  get size(): number {
    return this.blocks.size;
  }

  /** The router name of an engine block and its adapter, or undefined. */
  nameOf(hash: EngineHash): { readonly name: BlockHash; readonly loraName: string | null } | undefined {
    return this.blocks.get(hash);
  }

  /** Names a stored event's blocks and remembers them; null when its parent is unknown (an orphan). */
  nameStored(event: StoredEvent): NamedStore | null {
    let previous: number = TOKEN_CHAIN_ROOT;
    if (event.parent !== null) {
      const parent = this.touch(event.parent);
      if (parent === undefined) return null;
      previous = parent.name;
    }
    const anchor = event.parent === null ? null : previous;
    const blocks: BlockHash[] = [];
    let parentHash = event.parent;
    for (let i = 0; i < event.hashes.length; i++) {
      const extra = tokenBlockExtra(event.loraName, event.cacheSalt, parentHash === null);
      const name = hashTokenBlock53(event.tokens, i * event.blockSize, event.blockSize, previous, extra);
      const hash = event.hashes[i] as EngineHash;
      const known = this.blocks.get(hash);
      const copies = known !== undefined && known.epoch === this.epoch ? known.copies + 1 : 1;
      this.remember(hash, { name, parent: parentHash, loraName: event.loraName, copies, epoch: this.epoch });
      blocks.push(name);
      previous = name;
      parentHash = hash;
    }
    return { anchor, blocks, last: parentHash as EngineHash, loraName: event.loraName };
  }

  /**
   * A BlockRemoved of `hash`: true when it was the engine's last copy (the rank no longer holds the block),
   * false while another copy stays cached. A block whose count is unknown (stored before a clear or
   * resync, or before this reader's replay reached back) is taken as one copy.
   */
  release(hash: EngineHash): boolean {
    const block = this.blocks.get(hash);
    if (block === undefined || block.epoch !== this.epoch || block.copies <= 1) {
      if (block !== undefined) block.copies = 0;
      return true;
    }
    block.copies -= 1;
    return false;
  }

  /** The engine's cache was cleared, or the stream lost track of it: every copy count starts again. */
  forgetCopies(): void {
    this.epoch += 1;
  }

  /**
   * The names of the chain ending at engine block `last`, from its first block; null when a link is
   * missing or the chain is longer than maxChainBlocks.
   */
  nameChain(last: EngineHash): BlockHash[] | null {
    const chain: BlockHash[] = [];
    let hash: EngineHash | null = last;
    while (hash !== null) {
      const block = this.blocks.get(hash);
      if (block === undefined || chain.length >= this.maxChainBlocks) return null;
      chain.push(block.name);
      hash = block.parent;
    }
    return chain.reverse();
  }

  private touch(hash: EngineHash): NamedBlock | undefined {
    const block = this.blocks.get(hash);
    if (block !== undefined) {
      this.blocks.delete(hash);
      this.blocks.set(hash, block);
    }
    return block;
  }

  private remember(hash: EngineHash, block: NamedBlock): void {
    this.blocks.delete(hash);
    this.blocks.set(hash, block);
    if (this.blocks.size > this.capacity) {
      const oldest = this.blocks.keys().next().value as EngineHash;
      this.blocks.delete(oldest);
    }
  }
}
