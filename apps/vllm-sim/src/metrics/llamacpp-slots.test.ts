import { describe, expect, it } from 'vitest';
import { renderLlamaCppProps, renderLlamaCppSlots } from './llamacpp-slots';
import { MODEL_NAME, runMixedWorkload } from './metrics-test-support';

describe('llama.cpp /slots and /props', () => {
  const workload = runMixedWorkload('v1');

  it('lists min(slots, max_num_seqs) slots, the running sequence in slot 0', () => {
    const slots = renderLlamaCppSlots(workload.engine, 4);
    expect(slots.map((slot) => slot.id)).toEqual([0, 1, 2, 3]);
    expect(slots.map((slot) => slot.is_processing)).toEqual([true, false, false, false]);
    const [busy, idle] = slots;
    expect(busy).toMatchObject({
      id_task: workload.long.admissionOrder,
      n_ctx: 32_768,
      speculative: false,
      params: { n_predict: 400 },
      next_token: {
        has_next_token: true,
        n_decoded: workload.long.outputCount,
        n_remain: 400 - workload.long.outputCount,
      },
    });
    expect(workload.long.outputCount).toBeGreaterThan(0);
    expect(idle).toMatchObject({
      id_task: -1,
      is_processing: false,
      params: { n_predict: -1 },
      next_token: { n_remain: -1, n_decoded: 0 },
    });
    expect(JSON.stringify(idle?.params)).toContain('"temperature":0.800000011920929');
    expect(renderLlamaCppSlots(workload.engine)).toHaveLength(256);
    expect(renderLlamaCppSlots(workload.engine, 10_000)).toHaveLength(256);
  });

  it('reports total_slots in /props', () => {
    expect(renderLlamaCppProps(workload.engine, MODEL_NAME, 4)).toMatchObject({
      total_slots: 4,
      model_path: MODEL_NAME,
      default_generation_settings: { n_ctx: 32_768 },
    });
    expect(renderLlamaCppProps(workload.engine, MODEL_NAME).total_slots).toBe(256);
  });
});
