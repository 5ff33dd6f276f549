import { describe, expect, it } from 'vitest';
import { handCborBlockTuple, sha256 } from '../../test/kv-events-support';
import { blockExtraKeys, externalBlockHash, noneHashFor, VllmBlockHasher } from './vllm-block-hash';

const cborBlockTuple = handCborBlockTuple;

describe('vLLM sha256_cbor block hashes', () => {
  // PYTHONHASHSEED="0": cbor2.dumps("0") = 0x61 0x30; its SHA-256 is a published cross-language vector.
  const noneHash = noneHashFor('0');
  const hasher = new VllmBlockHasher(noneHash);
  const tokens = [0, 1, 23, 24, 255, 256, 1000, 65_535, 65_536, 151_643, 9, 8, 7, 6, 5, 4];

  it('derives NONE_HASH from the PYTHONHASHSEED string, else draws 32 random bytes', () => {
    expect(Buffer.from(noneHash).toString('hex')).toBe(
      '4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e',
    );
    expect(Buffer.from(noneHash)).toEqual(sha256(Buffer.from([0x61, 0x30])));
    expect(noneHashFor(undefined, (size) => new Uint8Array(size).fill(7))).toEqual(new Uint8Array(32).fill(7));
  });

  it('hashes (parent or NONE_HASH, tokens, extra keys) as CBOR, chaining from the parent digest', () => {
    const first = hasher.hashBlock(null, tokens, 0, 16, null);
    expect(Buffer.from(first)).toEqual(sha256(cborBlockTuple(noneHash, tokens, null)));
    const second = hasher.hashBlock(first, [...tokens, ...tokens], 16, 16, null);
    expect(Buffer.from(second)).toEqual(sha256(cborBlockTuple(first, tokens, null)));
    const salted = hasher.hashBlock(null, tokens, 0, 16, blockExtraKeys(0, 'tenant-a'));
    expect(Buffer.from(salted)).toEqual(sha256(cborBlockTuple(noneHash, tokens, 'tenant-a')));
    expect(blockExtraKeys(1, 'tenant-a')).toBeNull();
  });

  it('converts a digest to the event form: its last 8 bytes as an unsigned 64-bit int, or the digest', () => {
    const digest = new Uint8Array(32);
    digest.fill(0xff, 24);
    expect(externalBlockHash(digest, 'uint64')).toBe(2n ** 64n - 1n);
    digest[24] = 0x01;
    expect(externalBlockHash(digest, 'uint64')).toBe(0x01ff_ffff_ffff_ffffn);
    expect(externalBlockHash(digest, 'bytes')).toBe(digest);
  });
});
