/**
 * Benchmark: what the routing-text block size costs and buys (`npm run bench:block-size`).
 *
 * For each block size: the time to decide one request (render + hash the routing text, look the blocks
 * up in an index holding 200k blocks for 4 backends, cacheaware choice, record), the index entries one
 * request adds (each becomes a Redis entry once state is shared), and the granularity loss (bytes of a
 * shared prefix that cannot be matched because blocks are all-or-nothing: on average half a block, and
 * relative to an engine's 16-token ≈ 64-byte blocks).
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import type { ChatCompletionRequest } from '@kvroute/protocols';

// It takes no options, but answers --help and --version and refuses a flag it does not know rather than run.
parseCommandLine({
  usage: 'npm run bench:block-size',
  summary:
    'What the routing-text block size costs and buys: decision time, index entries per request and the\n' +
    'shared prefix lost to block granularity, for block sizes 16 to 512 bytes (a Markdown table on stdout).',
  options: {},
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { buildRoutingRequest, createPolicy, InMemoryRoutingState } = await import('@kvroute/routing');
const { mean } = await import('@kvroute/workloads');

const SIZES = [16, 32, 64, 128, 256, 512];
const BODY_BYTES = [2_000, 10_000, 40_000];
const BACKENDS = ['a', 'b', 'c', 'd'];

function conversation(bytes: number, seed: number): ChatCompletionRequest['messages'] {
  const messages: ChatCompletionRequest['messages'] = [
    { role: 'system', content: `System prompt shared by everyone. ${'Be helpful. '.repeat(50)}` },
  ];
  let size = 0;
  for (let turn = 0; size < bytes; turn++) {
    const content = `conversation ${seed} turn ${turn}: ${'question about the routing of tokens and caches '.repeat(4)}`;
    messages.push({ role: turn % 2 === 0 ? 'user' : 'assistant', content });
    size += content.length;
  }
  return messages;
}

async function main(): Promise<void> {
  console.log('| block bytes | body | decide µs (mean) | index entries / request | avg unmatched tail, bytes |');
  console.log('|---:|---:|---:|---:|---:|');
  for (const blockSizeBytes of SIZES) {
    for (const bodyBytes of BODY_BYTES) {
      const state = new InMemoryRoutingState({ maxBlocksPerBackend: 1_000_000, blockIdleTtlMs: 0, nowMs: () => 0 });
      const policy = createPolicy('cacheaware', {});
      // Warm the index: 50k blocks per backend from other conversations.
      for (let seed = 0; seed < 400; seed++) {
        const warmBody: ChatCompletionRequest = { model: 'm', messages: conversation(bodyBytes, seed) };
        const request = buildRoutingRequest(warmBody, { blockSizeBytes });
        await state.reserve(
          'm',
          BACKENDS[seed % 4] as string,
          `warm-${seed}`,
          request.blockHashes.slice(0, Math.ceil(50_000 / 100)),
          0,
        );
      }
      const timings: number[] = [];
      let entries = 0;
      for (let iteration = 0; iteration < 300; iteration++) {
        const body: ChatCompletionRequest = { model: 'm', messages: conversation(bodyBytes, iteration % 50) };
        const started = performance.now();
        const request = buildRoutingRequest(body, { blockSizeBytes });
        const snapshot = await state.snapshot('m', BACKENDS, request.blockHashes);
        const decision = policy.choose(
          request,
          BACKENDS.map((id) => ({
            backend: { id, weight: 1 },
            inflight: snapshot.inflight.get(id) ?? 0,
            matchBlocks: snapshot.matchBlocks.get(id) ?? 0,
            pendingPrefillTokens: 0,
          })),
          { nowMs: 0, random: Math.random },
        );
        if (decision.kind === 'routed')
          await state.reserve('m', decision.backendId, `r${iteration}`, request.blockHashes, 0);
        await state.release('m', decision.kind === 'routed' ? decision.backendId : 'a', `r${iteration}`);
        if (iteration >= 50) timings.push((performance.now() - started) * 1000);
        entries = request.blockHashes.length;
      }
      console.log(
        `| ${blockSizeBytes} | ${bodyBytes / 1000} kB | ${mean(timings).toFixed(1)} | ${entries} | ${(blockSizeBytes / 2).toFixed(0)} |`,
      );
    }
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
