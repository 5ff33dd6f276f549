import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cpuTicksFromStat, machineCpuSeconds, ownCpuSeconds, processCpuSeconds, systemCpuTicks } from './process-cpu';

describe('cpuTicksFromStat', () => {
  it('adds utime and stime, even when the command name holds spaces and parentheses', () => {
    const stat = '4242 (node (a) b) S 1 4242 4242 0 -1 4194304 1000 0 0 0 150 25 0 0 20 0 11 0 100 0 0';
    expect(cpuTicksFromStat(stat)).toBe(175);
  });

  it('rejects a line it cannot read', () => {
    expect(() => cpuTicksFromStat('garbage')).toThrow();
  });
});

describe.skipIf(!existsSync('/proc/self/stat'))('processCpuSeconds', () => {
  it('grows as this process burns CPU, and is 0 for a process that does not exist', () => {
    const before = processCpuSeconds(process.pid);
    const until = performance.now() + 60;
    while (performance.now() < until) {
      // burn CPU
    }
    expect(processCpuSeconds(process.pid)).toBeGreaterThan(before);
    expect(processCpuSeconds(2 ** 30)).toBe(0);
  });

  it('reads the machine and this process, children included', () => {
    const machine = machineCpuSeconds();
    expect(machine?.busy).toBeGreaterThan(0);
    expect(ownCpuSeconds()).toBeGreaterThan(0);
  });
});

describe('systemCpuTicks', () => {
  it('counts user, nice and system as busy, and steal apart', () => {
    const stat = 'cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 50 2 25 500 10 1 1 3 0 0\n';
    expect(systemCpuTicks(stat)).toEqual({ busy: 155, steal: 7 });
    expect(() => systemCpuTicks('cpu 1 2')).toThrow();
  });
});
