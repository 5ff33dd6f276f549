import { describe, expect, it } from 'vitest';
import { createLogger } from './create-logger';

/** A pino destination that keeps each written line. */
function captureLines(): { lines: string[]; write(line: string): void } {
  const lines: string[] = [];
  return { lines, write: (line: string) => void lines.push(line) };
}

function parseLines(lines: readonly string[]): Record<string, unknown>[] {
  return lines.map((line) => JSON.parse(line) as Record<string, unknown>);
}

describe('createLogger', () => {
  it('writes JSON lines with service, component, level label and ISO time', () => {
    const destination = captureLines();
    const logger = createLogger({ service: 'router', level: 'info', version: '1.2.3', destination });
    logger.child({ component: 'proxy' }).info({ backend: 'b1' }, 'upstream connected');

    const [record] = parseLines(destination.lines);
    expect(record).toMatchObject({
      service: 'router',
      version: '1.2.3',
      component: 'proxy',
      level: 'info',
      backend: 'b1',
      msg: 'upstream connected',
    });
    expect(record?.['time']).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    expect(record).not.toHaveProperty('pid');
  });

  it('drops lines below the configured level', () => {
    const destination = captureLines();
    const logger = createLogger({ service: 'router', level: 'warn', destination });
    logger.info('hidden');
    logger.warn('shown');
    expect(parseLines(destination.lines).map((record) => record['msg'])).toEqual(['shown']);
  });

  it('never writes prompt text, messages, bodies or authorization headers', () => {
    const destination = captureLines();
    const logger = createLogger({ service: 'router', level: 'debug', destination });
    const secretPrompt = 'my secret system prompt about project Falcon';

    logger.info({ prompt: secretPrompt }, 'completion');
    logger
      .child({ component: 'routing' })
      .debug(
        { request: { model: 'llama', prompt: secretPrompt, messages: [{ role: 'user', content: secretPrompt }] } },
        'decision',
      );
    logger.info(
      {
        req: {
          method: 'POST',
          headers: { authorization: 'Bearer sk-live-123', 'x-api-key': 'k-456' },
          body: { prompt: secretPrompt },
        },
      },
      'request',
    );
    logger.info({ body: secretPrompt }, 'raw body');

    const output = destination.lines.join('');
    expect(destination.lines).toHaveLength(4);
    expect(output).not.toContain('Falcon');
    expect(output).not.toContain('sk-live-123');
    expect(output).not.toContain('k-456');
    const [completion, decision, request] = parseLines(destination.lines);
    expect(completion?.['prompt']).toBe('[Redacted]');
    expect(decision?.['request']).toEqual({ model: 'llama', prompt: '[Redacted]', messages: '[Redacted]' });
    expect(request?.['req']).toMatchObject({
      method: 'POST',
      headers: { authorization: '[Redacted]' },
      body: '[Redacted]',
    });
  });

  it('formats readable lines in pretty mode, still redacted', () => {
    const destination = captureLines();
    const logger = createLogger({ service: 'vllm-sim', level: 'info', pretty: true, destination });
    logger.child({ component: 'engine' }).info({ prompt: 'hidden words', queued: 3 }, 'batch step');

    expect(destination.lines).toHaveLength(1);
    expect(destination.lines[0]).toMatch(
      /^\d{2}:\d{2}:\d{2}\.\d{3} INFO  vllm-sim\/engine: batch step {2}prompt="\[Redacted\]" queued=3\n$/,
    );
  });
});
