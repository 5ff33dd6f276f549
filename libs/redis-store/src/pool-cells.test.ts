import { describe, expect, it } from 'vitest';
import { backendCell, cellKeyOf, requestCellOrder } from './pool-cells';

const ids = Array.from({ length: 600 }, (_, index) => `10.0.${Math.floor(index / 250)}.${index % 250}:8000`);

describe('backendCell', () => {
  it('puts every backend in cell 0 of a pool that is not split', () => {
    expect(ids.every((id) => backendCell(id, 1) === 0)).toBe(true);
  });

  it('spreads backends evenly over the cells, the same way every time', () => {
    const sizes = [0, 0, 0];
    for (const id of ids) sizes[backendCell(id, 3)]! += 1;
    for (const size of sizes) expect(size).toBeGreaterThan(600 / 3 - 45);
    expect(ids.map((id) => backendCell(id, 3))).toEqual(ids.map((id) => backendCell(id, 3)));
  });

  it('moves only the new cell’s share of the backends when a cell is added (rendezvous)', () => {
    const moved = ids.filter((id) => backendCell(id, 4) !== backendCell(id, 3));
    expect(moved.every((id) => backendCell(id, 4) === 3)).toBe(true);
    expect(moved.length).toBeGreaterThan(600 / 4 - 45);
    expect(moved.length).toBeLessThan(600 / 4 + 45);
  });
});

describe('requestCellOrder', () => {
  it('orders every cell with backends, leaves empty cells out, and is a function of the cell key', () => {
    expect(requestCellOrder(42, [3, 0, 5]).sort()).toEqual([0, 2]);
    expect(requestCellOrder(42, [3, 2, 5])).toEqual(requestCellOrder(42, [3, 2, 5]));
    expect(requestCellOrder(42, [0, 0])).toEqual([]);
  });

  it('sends each cell a share of the cell keys that follows its share of the backends', () => {
    const sizes = [10, 20, 30];
    const firsts = [0, 0, 0];
    const heads = 6_000;
    for (let head = 0; head < heads; head++) firsts[requestCellOrder(head * 7_919 + 13, sizes)[0] as number]! += 1;
    sizes.forEach((size, cell) => expect(Math.abs((firsts[cell] as number) / heads - size / 60)).toBeLessThan(0.03));
  });

  it('keeps a key in its cell when another cell loses backends (only that cell’s keys move)', () => {
    const before = Array.from({ length: 2_000 }, (_, head) => requestCellOrder(head, [10, 10, 10])[0]);
    const after = Array.from({ length: 2_000 }, (_, head) => requestCellOrder(head, [10, 10, 9])[0]);
    before.forEach((cell, head) => {
      if (cell !== 2) expect(after[head]).toBe(cell);
    });
  });
});

describe('cellKeyOf', () => {
  const chain = Array.from({ length: 100 }, (_, index) => 1_000 + index);
  it('keys a completion (no first turn) by its head hash, whatever its length: its prompt grows, its head stays', () => {
    expect(cellKeyOf({ blockHashes: chain, blockSizeBytes: 256, headHash: 7 }, 16_384)).toBe(7);
    expect(cellKeyOf({ blockHashes: chain.slice(0, 10), blockSizeBytes: 256, headHash: 7 }, 16_384)).toBe(7);
    expect(
      cellKeyOf({ blockHashes: [], blockSizeBytes: 256, headHash: 7, firstTurnBytes: { start: 0, end: 100 } }, 16_384),
    ).toBe(7);
  });

  it('keys a first turn shorter than a block by the block it ends in, and a text shorter than the key point by its last block', () => {
    expect(
      cellKeyOf(
        { blockHashes: chain, blockSizeBytes: 256, headHash: 7, firstTurnBytes: { start: 10, end: 100 } },
        16_384,
      ),
    ).toBe(chain[0]);
    expect(
      cellKeyOf(
        {
          blockHashes: chain.slice(0, 5),
          blockSizeBytes: 256,
          headHash: 7,
          firstTurnBytes: { start: 10, end: 20_000 },
        },
        16_384,
      ),
    ).toBe(chain[4]);
    // A first turn past the routed blocks (maxRoutedBlocks cut a huge prompt): the last block routed.
    expect(
      cellKeyOf(
        {
          blockHashes: chain.slice(0, 10),
          blockSizeBytes: 256,
          headHash: 7,
          firstTurnBytes: { start: 5_000, end: 6_000 },
        },
        16_384,
      ),
    ).toBe(chain[9]);
  });

  it('keys a chat at the end of its first turn, or keyBytes into it: the same for every later turn of the conversation', () => {
    const firstTurnBytes = { start: 1_024, end: 3_000 };
    const turns = [12, 40, 100].map((length) =>
      cellKeyOf({ blockHashes: chain.slice(0, length), blockSizeBytes: 256, headHash: 7, firstTurnBytes }, 16_384),
    );
    expect(turns).toEqual([chain[10], chain[10], chain[10]]);
    expect(
      cellKeyOf(
        { blockHashes: chain, blockSizeBytes: 256, headHash: 7, firstTurnBytes: { start: 1_024, end: 20_000 } },
        2_048,
      ),
    ).toBe(chain[11]);
  });
});
