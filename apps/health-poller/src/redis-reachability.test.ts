import { EventEmitter } from 'node:events';
import { createLogger } from '@kvroute/platform';
import { describe, expect, it } from 'vitest';
import { RedisReachability, type ReachabilitySource } from './redis-reachability';

/** A logger whose lines land in `lines` as [level, msg, has a stack]. */
function recordingLogger(): { logger: ReturnType<typeof createLogger>; lines: [string, string, boolean][] } {
  const lines: [string, string, boolean][] = [];
  const logger = createLogger({
    service: 'test',
    level: 'debug',
    destination: {
      write: (line: string) => {
        const record = JSON.parse(line) as { level: string; msg: string };
        lines.push([record.level, record.msg, line.includes('"stack"')]);
      },
    },
  });
  return { logger, lines };
}

const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' });
const lostLock = new Error('could not renew lock for job repeat:b:1');

describe('RedisReachability', () => {
  it('puts other errors down to the outage while Redis is down and for the aftermath after it is back, and warns of them after', () => {
    let now = 0;
    const { logger, lines } = recordingLogger();
    const reachability = new RedisReachability(logger, () => now, 5_000);
    const source = new EventEmitter();
    reachability.watch(source as unknown as ReachabilitySource);
    source.emit('ready');
    expect(reachability.inOutage).toBe(false);
    reachability.failed(lostLock, 'before');
    source.emit('error', refused);
    reachability.failed(lostLock, 'during');
    now = 1_000;
    source.emit('ready');
    now = 5_999;
    reachability.failed(lostLock, 'aftermath');
    expect(reachability.inOutage).toBe(true);
    now = 6_000;
    expect(reachability.inOutage).toBe(false);
    reachability.failed(lostLock, 'after');
    reachability.failed(refused, 'a connection error after');
    expect(lines.map(([level, msg]) => [level, msg])).toEqual([
      ['warn', 'before'],
      ['warn', expect.stringMatching(/^Redis unreachable/)],
      ['debug', 'during'],
      ['info', expect.stringMatching(/^Redis reachable again/)],
      ['debug', 'aftermath'],
      ['warn', 'after'],
      ['debug', 'a connection error after'],
    ]);
    // A warning of a fault keeps its stack; the outage's lines have none.
    expect(lines.filter(([, , stack]) => stack).map(([, msg]) => msg)).toEqual(['before', 'after']);
  });
});
