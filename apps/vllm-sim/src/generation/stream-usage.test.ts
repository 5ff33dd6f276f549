import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimConfig } from '../config';
import { createSimServer, type SimServer } from '../create-sim';
import { SIM_SYSTEM_FINGERPRINT } from './response-format';

/**
 * A stream with `stream_options.include_usage` against the same stream without it, over HTTP: the only
 * differences are vLLM's (response-format.ts): the usage chunk before `[DONE]`, and the terminal chunks'
 * `system_fingerprint`, which moves to it.
 */
/** A stream's events grouped by choice index (in order within each), the events without one last. */
function byChoice(stream: string): Map<string, string[]> {
  const groups = new Map<string, string[]>();
  for (const event of stream.split('\n\n')) {
    const key = /"choices":\[\{"index":(\d+)/.exec(event)?.[1] ?? 'none';
    groups.set(key, [...(groups.get(key) ?? []), event]);
  }
  return groups;
}

describe('vllm-sim streams with and without include_usage', () => {
  let sim: SimServer;
  let url: string;
  beforeAll(async () => {
    sim = await createSimServer(SimConfig.parse({ port: 0, model: 'test-model', profile: 'fast', seed: 3 }));
    url = await sim.listen();
  });
  afterAll(() => sim.close());

  const streamText = async (path: string, body: object): Promise<string> => {
    const response = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(response.status).toBe(200);
    // Each request has its own id and creation second: compare what they are not.
    return (await response.text()).replace(/"id":"[^"]+"/g, '"id":"ID"').replace(/"created":\d+/g, '"created":0');
  };

  it.each([
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'count to three, with a twist' }], n: 2 }],
    ['/v1/completions', { prompt: 'Once upon a time, in a land far away' }],
  ])(
    '%s: one more chunk (choices [], usage, the fingerprint) and the fingerprint off the terminal chunks',
    async (path, fields) => {
      const base = { model: 'test-model', max_tokens: 4, stream: true, ...fields };
      const without = await streamText(path, base);
      const withUsage = await streamText(path, { ...base, stream_options: { include_usage: true } });
      const stamp = `,"system_fingerprint":"${SIM_SYSTEM_FINGERPRINT}"`;
      const terminalEvents = without.split('\n\n').filter((event) => event.includes('"finish_reason":"'));
      expect(terminalEvents.length).toBe(path === '/v1/completions' ? 1 : 2);
      for (const event of terminalEvents) expect(event.endsWith(`${stamp}}`)).toBe(true);
      expect(without.split(stamp)).toHaveLength(terminalEvents.length + 1);

      const usageEvent = withUsage.split('\n\n').at(-3) ?? '';
      expect(usageEvent).toMatch(
        new RegExp(
          String.raw`^data: \{"id":"ID","object":"(chat\.completion\.chunk|text_completion)","created":0,"model":"test-model",` +
            String.raw`"choices":\[\],"usage":\{"prompt_tokens":\d+,"total_tokens":\d+,"completion_tokens":\d+` +
            String.raw`(,"prompt_tokens_details":\{"cached_tokens":\d+\})?\},"system_fingerprint":"vllm-sim-[0-9a-f]+"\}$`,
        ),
      );
      const expected = without.replaceAll(stamp, '').replace('data: [DONE]\n\n', `${usageEvent}\n\ndata: [DONE]\n\n`);
      // Each choice's events in order; the choices of n > 1 interleave as the engine schedules them,
      // which differs between two runs on a busy machine.
      expect(byChoice(withUsage)).toEqual(byChoice(expected));
    },
  );
});
