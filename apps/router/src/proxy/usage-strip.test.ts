import { describe, expect, it } from 'vitest';
import { StreamUsageStrip } from './usage-strip';

/**
 * A stream as vLLM writes it with and without `stream_options.include_usage` (vllm chat_completion/serving.py):
 * with it, the terminal chunks lose their `system_fingerprint` and a usage chunk (`choices: []`) comes
 * before `[DONE]`. The strip, fed the first in any chunking, must give back exactly the second.
 */
interface StreamPair {
  readonly withUsage: string;
  readonly without: string;
}

const FINGERPRINT = 'vllm-0.19.1-tp2-8c3e1f0a';

function chatStream(
  options: { eol?: string; choices?: number; fingerprint?: string | null; texts?: readonly string[] } = {},
): StreamPair {
  const eol = options.eol ?? '\n';
  const choices = options.choices ?? 1;
  const fingerprint = options.fingerprint === undefined ? FINGERPRINT : options.fingerprint;
  const texts = options.texts ?? ['Hello', ' world', '!'];
  const head = '{"id":"chatcmpl-7f3a","object":"chat.completion.chunk","created":1761204418,"model":"Qwen/Qwen3-8B"';
  const event = (json: string): string => `data: ${json}${eol}${eol}`;
  const body = (stamp: boolean): string[] => {
    const events: string[] = [];
    for (let i = 0; i < choices; i++)
      events.push(
        event(
          `${head},"choices":[{"index":${i},"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null}`,
        ),
      );
    for (const text of texts) {
      for (let i = 0; i < choices; i++)
        events.push(
          event(
            `${head},"choices":[{"index":${i},"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null,"token_ids":null}]}`,
          ),
        );
    }
    for (let i = 0; i < choices; i++) {
      const tail = stamp && fingerprint !== null ? `,"system_fingerprint":${JSON.stringify(fingerprint)}` : '';
      events.push(
        event(
          `${head},"choices":[{"index":${i},"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]${tail}}`,
        ),
      );
    }
    return events;
  };
  const completionTokens = texts.length * choices;
  const usageFigures =
    `"usage":{"prompt_tokens":31,"total_tokens":${31 + completionTokens},"completion_tokens":${completionTokens},` +
    `"prompt_tokens_details":{"cached_tokens":16}}`;
  const fingerprintField = fingerprint === null ? '' : `,"system_fingerprint":${JSON.stringify(fingerprint)}`;
  const usage = `${head},"choices":[],${usageFigures}${fingerprintField}}`;
  const done = event('[DONE]');
  return { withUsage: [...body(false), event(usage), done].join(''), without: [...body(true), done].join('') };
}

/** Feeds `input` cut at `cuts` (ascending byte offsets); returns the output and what was out after each chunk. */
function run(input: Buffer, cuts: readonly number[]): { output: Buffer; progress: Buffer[] } {
  const strip = new StreamUsageStrip();
  const out: Buffer[] = [];
  const progress: Buffer[] = [];
  let from = 0;
  for (const cut of [...cuts, input.length]) {
    const piece = strip.feed(input.subarray(from, cut));
    if (piece !== null) out.push(piece);
    progress.push(Buffer.concat(out));
    from = cut;
  }
  const rest = strip.end();
  if (rest !== null) out.push(rest);
  return { output: Buffer.concat(out), progress };
}

/** A small deterministic generator (tests must not depend on Math.random). */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1_664_525 + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

function randomCuts(length: number, count: number, random: () => number): number[] {
  const cuts = new Set<number>();
  while (cuts.size < Math.min(count, length - 1)) cuts.add(1 + Math.floor(random() * (length - 1)));
  return [...cuts].sort((a, b) => a - b);
}

describe('StreamUsageStrip', () => {
  const cases: Array<[string, StreamPair]> = [
    ['LF framing, one choice', chatStream()],
    ['CRLF framing', chatStream({ eol: '\r\n' })],
    ['CR framing', chatStream({ eol: '\r' })],
    ['two choices finishing in the same step', chatStream({ choices: 2 })],
    ['an engine without a fingerprint', chatStream({ fingerprint: null })],
    ['a fingerprint with escapes', chatStream({ fingerprint: 'custom "fp" \\ é' })],
    [
      'text that looks like the keys',
      chatStream({ texts: ['{"choices":[],"usage":{"prompt_tokens":1}}', '"finish_reason":"stop"', ' é ✓ 😀'] }),
    ],
  ];

  it.each(cases)('%s: every single cut gives exactly the stream without the option', (_name, pair) => {
    const input = Buffer.from(pair.withUsage);
    const expected = Buffer.from(pair.without);
    expect(run(input, []).output.toString()).toBe(pair.without);
    for (let cut = 1; cut < input.length; cut++)
      expect(run(input, [cut]).output.equals(expected), `cut at ${cut}`).toBe(true);
  });

  it.each(cases)('%s: random chunkings (many cuts, several events per chunk) give the same', (_name, pair) => {
    const random = seeded(pair.withUsage.length);
    const input = Buffer.from(pair.withUsage);
    const expected = Buffer.from(pair.without);
    for (let trial = 0; trial < 200; trial++) {
      const cuts = randomCuts(input.length, 1 + Math.floor(random() * 40), random);
      expect(run(input, cuts).output.equals(expected), `cuts ${cuts.join(',')}`).toBe(true);
    }
  });

  it('passes each complete event on with the chunk that completed it (only a terminal run waits for the next event)', () => {
    const pair = chatStream({ choices: 2 });
    const events = pair.withUsage.split(/(?<=\n\n)/);
    const stamped = pair.without.split(/(?<=\n\n)/).filter((event) => event.includes('"finish_reason":"'));
    // Cut inside every event: chunk k + 1 completes event k.
    const cuts: number[] = [];
    let offset = 0;
    for (const event of events) {
      cuts.push(offset + Math.floor(event.length / 2));
      offset += event.length;
    }
    const { progress } = run(Buffer.from(pair.withUsage), cuts);
    let expected = '';
    let held = 0;
    let passingThrough = false;
    events.forEach((event, index) => {
      if (event.includes('"finish_reason":"')) held++;
      else {
        if (held > 0) expected += stamped.splice(0, held).join('');
        held = 0;
        if (!event.includes('"choices":[]')) expected += event;
        else passingThrough = true;
      }
      const emitted = progress[index + 1]?.toString() ?? '';
      // Once the usage event is gone the rest is relayed as it comes, an unfinished event's start included.
      if (passingThrough) expect(emitted.startsWith(expected), `after event ${index}`).toBe(true);
      else expect(emitted, `after event ${index}`).toBe(expected);
    });
    expect(expected).toBe(pair.without);
  });

  it('keeps the usage it took out, for the learn stage, in any chunking', () => {
    const input = Buffer.from(chatStream().withUsage);
    for (const cuts of [[], [input.length - 20], randomCuts(input.length, 30, seeded(7))]) {
      const strip = new StreamUsageStrip();
      let from = 0;
      for (const cut of [...cuts, input.length]) {
        strip.feed(input.subarray(from, cut));
        from = cut;
      }
      strip.end();
      expect(strip.usage).toMatchObject({ promptTokens: 31, cachedTokens: 16, completionTokens: expect.any(Number) });
    }
    // Nothing taken out (the engine reported usage by itself): nothing kept; learn reads the tail.
    const forced = new StreamUsageStrip();
    forced.feed(
      Buffer.from(
        'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":{"prompt_tokens":3}}\n\n',
      ),
    );
    expect(forced.usage).toBeNull();
  });

  it('releases held terminal events unchanged when no usage event follows (the engine ignored the option)', () => {
    const pair = chatStream();
    const noUsage = pair.withUsage.replace(/data: [^\n]*"choices":\[\],"usage"[^\n]*\n\n/, '');
    expect(noUsage).not.toContain('"usage"');
    expect(run(Buffer.from(noUsage), [10, 400]).output.toString()).toBe(noUsage);
  });

  it('stamps a terminal event released early (a choice finished before the others) with the fingerprint remembered from the backend', () => {
    const head = 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":';
    const terminal = (index: number, stamp: boolean) =>
      `${head}${index},"delta":{"content":""},"finish_reason":"stop"}]${stamp ? `,"system_fingerprint":"${FINGERPRINT}"` : ''}}\n\n`;
    const delta = (index: number) => `${head}${index},"delta":{"content":"x"},"finish_reason":null}]}\n\n`;
    const usage =
      `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,` +
      `"total_tokens":5,"completion_tokens":2},"system_fingerprint":"${FINGERPRINT}"}\n\n`;
    const withUsage = [terminal(0, false), delta(1), terminal(1, false), usage, 'data: [DONE]\n\n'].join('');
    const without = [terminal(0, true), delta(1), terminal(1, true), 'data: [DONE]\n\n'].join('');
    const feedAll = (strip: StreamUsageStrip): string => {
      const out = [strip.feed(Buffer.from(withUsage)), strip.end()].filter((part) => part !== null);
      return Buffer.concat(out).toString();
    };
    const memory = { last: null as Buffer | null };
    // Nothing remembered yet: the early terminal event goes out as it came (the documented gap).
    expect(feedAll(new StreamUsageStrip(memory))).toBe(without.replace(`,"system_fingerprint":"${FINGERPRINT}"`, ''));
    expect(memory.last?.toString()).toBe(`"${FINGERPRINT}"`);
    // The next stream from that backend: exact.
    expect(feedAll(new StreamUsageStrip(memory))).toBe(without);
  });

  it('leaves a stream alone when the engine reports usage on every chunk anyway (forced or continuous usage)', () => {
    const stream = [
      'data: {"id":"c","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],"usage":{"prompt_tokens":5,' +
        '"total_tokens":6,"completion_tokens":1}}\n\n',
      'data: {"id":"c","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,' +
        '"total_tokens":6,"completion_tokens":1}}\n\n',
      'data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1}}\n\n',
      'data: [DONE]\n\n',
    ].join('');
    expect(run(Buffer.from(stream), [50, 200]).output.toString()).toBe(stream);
  });

  it('reads spaced JSON and multi-line data as the same events', () => {
    const withUsage =
      'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "length"}]}\n\n' +
      'data: {"choices": [ ],\ndata:  "usage": {"prompt_tokens": 3, "completion_tokens": 1}, "system_fingerprint": "fp-1"}\n\n' +
      'data: [DONE]\n\n';
    const without =
      'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "length"}],"system_fingerprint":"fp-1"}\n\ndata: [DONE]\n\n';
    expect(run(Buffer.from(withUsage), [30]).output.toString()).toBe(without);
  });

  it('stops buffering an event larger than any usage event could be, and passes everything on', () => {
    const huge = `data: {"choices":[{"delta":{"content":"${'x'.repeat(1_100_000)}"}}]}\n\n`;
    const input = Buffer.from(huge + 'data: [DONE]\n\n');
    const strip = new StreamUsageStrip();
    const first = strip.feed(input.subarray(0, 1_050_000));
    expect(first?.length).toBe(1_050_000);
    expect(strip.feed(input.subarray(1_050_000))?.equals(input.subarray(1_050_000))).toBe(true);
    expect(strip.end()).toBeNull();
  });
});
