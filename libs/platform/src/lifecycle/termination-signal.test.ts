import { EventEmitter } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import { onTerminationSignal } from './termination-signal';

/** Stands in for `process`: signals are plain events, `exit` is a spy. */
class FakeProcess extends EventEmitter {
  readonly exit = vi.fn<(code?: number) => void>();
}

describe('onTerminationSignal', () => {
  it('runs the handler once on the first signal, with that signal', () => {
    const processLike = new FakeProcess();
    const handler = vi.fn();
    onTerminationSignal(handler, { processLike });

    processLike.emit('SIGTERM', 'SIGTERM');

    expect(handler).toHaveBeenCalledExactlyOnceWith('SIGTERM');
    expect(processLike.exit).not.toHaveBeenCalled();
  });

  it('forces exit(1) on a second signal without running the handler again', () => {
    const processLike = new FakeProcess();
    const handler = vi.fn(() => new Promise<void>(() => undefined));
    onTerminationSignal(handler, { processLike });

    processLike.emit('SIGINT', 'SIGINT');
    processLike.emit('SIGTERM', 'SIGTERM');

    expect(handler).toHaveBeenCalledOnce();
    expect(processLike.exit).toHaveBeenCalledExactlyOnceWith(1);
  });

  it('watches only the signals it is given', () => {
    const processLike = new FakeProcess();
    const handler = vi.fn();
    onTerminationSignal(handler, { processLike, signals: ['SIGUSR2'] });

    processLike.emit('SIGINT', 'SIGINT');
    expect(handler).not.toHaveBeenCalled();
    processLike.emit('SIGUSR2', 'SIGUSR2');
    expect(handler).toHaveBeenCalledOnce();
  });

  it('exits with 1 and reports the error when the handler rejects', async () => {
    const processLike = new FakeProcess();
    const failure = new Error('close failed');
    const onError = vi.fn();
    onTerminationSignal(() => Promise.reject(failure), { processLike, onError });

    processLike.emit('SIGTERM', 'SIGTERM');
    await vi.waitFor(() => expect(processLike.exit).toHaveBeenCalledWith(1));
    expect(onError).toHaveBeenCalledWith(failure);
  });

  it('exits with 1 when the handler throws synchronously', () => {
    const processLike = new FakeProcess();
    onTerminationSignal(
      () => {
        throw new Error('boom');
      },
      { processLike },
    );
    processLike.emit('SIGINT', 'SIGINT');
    expect(processLike.exit).toHaveBeenCalledWith(1);
  });

  it('removes its listeners when disposed', () => {
    const processLike = new FakeProcess();
    const handler = vi.fn();
    const dispose = onTerminationSignal(handler, { processLike });
    expect(processLike.listenerCount('SIGINT')).toBe(1);

    dispose();
    processLike.emit('SIGINT', 'SIGINT');

    expect(processLike.listenerCount('SIGINT')).toBe(0);
    expect(processLike.listenerCount('SIGTERM')).toBe(0);
    expect(handler).not.toHaveBeenCalled();
  });
});
