import { describe, expect, it } from 'vitest';
import { KvEventRecorder } from '../kv-events/kv-event-recorder';
import type { KvEvent } from '../kv-events/kv-event-encoding';
import { noneHashFor, VllmBlockHasher } from '../kv-events/vllm-block-hash';
import { Engine, type SequenceSpec } from './engine';
import { runToIdle, traced, type Trace } from './engine-test-support';
import { LoraSlots } from './lora-slots';
import { getProfile } from './profiles';

function loraSlots(maxLoras = 1, maxCpuLoras = maxLoras): LoraSlots {
  return new LoraSlots({ maxLoras, maxCpuLoras, loadMs: 100, swapMs: 5, nowUnixSeconds: () => 1_000 });
}

function underAdapter(spec: SequenceSpec, name: string | undefined, id = 1): SequenceSpec {
  return name === undefined ? spec : { ...spec, lora: { name, id } };
}

const prompt = Array.from({ length: 64 }, (_, index) => 1_000 + index);

describe('LoRA scheduling in the engine', () => {
  it('skips a waiting request whose adapter has no slot, and admits the ones behind it', () => {
    const lora = loraSlots(1, 2);
    const engine = new Engine({ profile: getProfile('a100-7b'), version: 'v1', lora });
    const traces: Record<string, Trace> = { a: { tokens: 0 }, b: { tokens: 0 }, a2: { tokens: 0 } };
    engine.add(underAdapter(traced(prompt, 5, traces.a as Trace), 'a'), 0);
    engine.add(underAdapter(traced(prompt.slice(1), 5, traces.b as Trace), 'b', 2), 0);
    engine.add(underAdapter(traced(prompt.slice(2), 5, traces.a2 as Trace), 'a'), 0);
    const plan = engine.planStep(engine.profile.apiOverheadMs);
    expect(plan?.work.map((item) => item.sequence.spec.lora?.name)).toEqual(['a', 'a']);
    expect(engine.waitingCount).toBe(1);
    runToIdle(engine, plan?.startMs ?? 0);
    // b ran only once a's requests were done.
    expect(traces.b?.firstTokenAtMs).toBeGreaterThan(traces.a?.finishedAtMs as number);
  });

  it('adds the load time to the step whose batch needs an adapter not in memory, and a swap for a new slot', () => {
    const lora = loraSlots(1, 1);
    const plain = new Engine({ profile: getProfile('a100-7b'), version: 'v1' });
    const withLora = new Engine({ profile: getProfile('a100-7b'), version: 'v1', lora });
    const at = plain.profile.apiOverheadMs;
    plain.add(traced(prompt, 1, { tokens: 0 }), 0);
    withLora.add(underAdapter(traced(prompt, 1, { tokens: 0 }), 'a'), 0);
    const base = plain.planStep(at)?.durationMs as number;
    expect(withLora.planStep(at)?.durationMs).toBeCloseTo(base + 100 + 5);
    expect(lora.loads.get('a')).toBe(1);
  });
});

describe('LoRA in KV events', () => {
  it("hashes an adapter's blocks with its name as the first extra key and names it in BlockStored", () => {
    const hasher = new VllmBlockHasher(noneHashFor('0'));
    const batches: KvEvent[][] = [];
    const recorder = new KvEventRecorder({
      hasher,
      hashForm: 'bytes',
      sessionId: false,
      sink: { publish: (batch) => batches.push([...batch.events]) },
      nowUnixSeconds: () => 0,
    });
    const engine = new Engine({
      profile: getProfile('a100-7b'),
      version: 'v1',
      kvEvents: recorder,
      lora: loraSlots(2),
    });
    engine.add(underAdapter(traced(prompt, 1, { tokens: 0 }), 'sql', 7), 0);
    engine.add(traced(prompt, 1, { tokens: 0 }), 0);
    runToIdle(engine);
    const stored = batches.flat().filter((event) => event.type === 'BlockStored');
    expect(stored).toHaveLength(2);
    const [adapter, base] = stored as Array<Extract<KvEvent, { type: 'BlockStored' }>>;
    expect(adapter?.lora).toEqual({ name: 'sql', id: 7 });
    expect(adapter?.extraKeys[0]).toEqual(['sql']);
    expect(adapter?.extraKeys[3]).toEqual(['sql']);
    expect(base?.lora).toBeUndefined();
    expect(adapter?.blockHashes[0]).toEqual(hasher.hashBlock(null, prompt, 0, 16, ['sql']));
    expect(base?.blockHashes[0]).toEqual(hasher.hashBlock(null, prompt, 0, 16, null));
  });
});
