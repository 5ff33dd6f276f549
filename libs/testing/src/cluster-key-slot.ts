/** Hash slots of a Redis Cluster: every key maps to one of slots 0..16383, each slot is served by one master. */
export const CLUSTER_SLOT_COUNT = 16_384;

const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/** CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection): the checksum Redis Cluster hashes keys with. */
function crc16Xmodem(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/**
 * The slot of `key` as Redis computes it (same answer as `CLUSTER KEYSLOT`): if the key holds a `{` and, after it, a
 * `}` with at least one byte between, only those bytes (the hash tag) are hashed, so `{user:7}:a` and `{user:7}:b`
 * share a slot; otherwise the whole key is. Only the first `{` counts (`a{}{b}` has no tag: `{}` is empty). Strings
 * are hashed as their UTF-8 bytes, like the bytes a client sends.
 */
export function clusterKeySlot(key: string | Uint8Array): number {
  const bytes = typeof key === 'string' ? Buffer.from(key, 'utf8') : key;
  const open = bytes.indexOf(OPEN_BRACE);
  if (open !== -1) {
    const close = bytes.indexOf(CLOSE_BRACE, open + 1);
    if (close > open + 1) return crc16Xmodem(bytes.subarray(open + 1, close)) % CLUSTER_SLOT_COUNT;
  }
  return crc16Xmodem(bytes) % CLUSTER_SLOT_COUNT;
}
