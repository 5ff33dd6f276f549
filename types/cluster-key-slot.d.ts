// cluster-key-slot (the Redis Cluster slot function ioredis uses; libs/redis-store keys.ts) ships no types.
declare module 'cluster-key-slot' {
  /** The hash slot (0..16383) of a key: CRC16 of its hash tag, or of the whole key without one. */
  export default function generate(key: string | Buffer): number;
}
