import type { FlowQueueStore } from '@kvroute/redis-store';
import { describe, expect, it } from 'vitest';
import { StrayEntries } from './stray-entries';

/** A shared queue that records what it was asked to leave, and refuses while `down`. */
function recordingStore(): { store: FlowQueueStore; left: string[]; setDown: (down: boolean) => void } {
  const left: string[] = [];
  let down = false;
  const refuse = (): Promise<never> => Promise.reject(new Error('unused'));
  const store: FlowQueueStore = {
    enter: refuse,
    poll: refuse,
    renew: refuse,
    inspect: refuse,
    leave: async (pool, id) => {
      if (down) throw new Error('redis down');
      left.push(`${pool}/${id}`);
    },
  };
  return { store, left, setDown: (value) => (down = value) };
}

const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));

describe('StrayEntries', () => {
  it('leaves at once, and remembers what it could not leave until the shared queue is back', async () => {
    const { store, left, setDown } = recordingStore();
    const strays = new StrayEntries();
    strays.leave(store, 'm', 'a');
    await settle();
    expect(left).toEqual(['m/a']);
    setDown(true);
    strays.leave(store, 'm', 'b');
    strays.leave(store, 'n', 'c');
    await settle();
    expect(strays.size).toBe(2);
    setDown(false);
    strays.flush(store);
    await settle();
    expect(left).toEqual(['m/a', 'm/b', 'n/c']);
    expect(strays.size).toBe(0);
  });
});
