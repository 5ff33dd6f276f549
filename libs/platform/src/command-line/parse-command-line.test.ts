import { describe, expect, it } from 'vitest';
import { buildInfo, versionLine } from '../build-info';
import { closestName, editDistance, interpretCommandLine, usageAsLaunched } from './parse-command-line';

const spec = (argv: string[]) =>
  ({
    usage: 'npm run bench:limits -- [options]',
    summary: 'Limits across replicas.',
    options: {
      seconds: { type: 'string', default: '60', value: 'number', description: 'how long' },
      pools: { type: 'string', default: '4,16', value: 'numbers' },
      pin: { type: 'boolean', default: true },
    },
    allowNegative: true,
    argv,
  }) as const;

describe('interpretCommandLine', () => {
  it('prints the usage for --help and -h, even beside a mistyped flag, and exits 0', () => {
    for (const argv of [['--help'], ['-h'], ['--bogus', '--help'], ['--', '--help']]) {
      const outcome = interpretCommandLine('npm run bench:limits', spec(argv));
      expect(outcome).toMatchObject({ kind: 'exit', code: 0 });
      const text = outcome.kind === 'exit' ? (outcome.stdout ?? '') : '';
      expect(text.split('\n')[0]).toBe('npm run bench:limits -- [options]');
      expect(text).toMatch(/--seconds N +how long \(default 60\)/);
      expect(text).toMatch(/--\[no-\]pin/);
      expect(text).toMatch(/--version/);
    }
  });

  it('prints the build for --version and exits 0', () => {
    expect(interpretCommandLine('x', spec(['--version']))).toEqual({
      kind: 'exit',
      code: 0,
      stdout: `${versionLine(buildInfo())}\n`,
    });
  });

  it('turns a user mistake into one line naming the flag, exit 2', () => {
    const error = (argv: string[]) => {
      const outcome = interpretCommandLine('npm run bench:limits', spec(argv));
      return outcome.kind === 'exit' && outcome.code === 2 ? outcome.stderr : `not refused: ${JSON.stringify(outcome)}`;
    };
    expect(error(['--secnds', '3'])).toBe(
      'npm run bench:limits: unknown flag --secnds (did you mean --seconds?) (see --help)\n',
    );
    expect(error(['--colour'])).toBe('npm run bench:limits: unknown flag --colour (see --help)\n');
    expect(error(['--seconds'])).toBe('npm run bench:limits: --seconds expects a value (see --help)\n');
    expect(error(['--seconds', '3s'])).toBe('npm run bench:limits: --seconds: "3s" is not a number (see --help)\n');
    expect(error(['--pools', '4,x'])).toBe(
      'npm run bench:limits: --pools: "4,x" is not a comma-separated list of numbers (see --help)\n',
    );
    expect(error(['stray'])).toBe(
      'npm run bench:limits: unexpected argument "stray"; options are given as --name value (see --help)\n',
    );
  });

  it('returns the values otherwise, with defaults and negations', () => {
    expect(interpretCommandLine('x', spec(['--seconds', '5', '--no-pin']))).toEqual({
      kind: 'values',
      values: { seconds: '5', pools: '4,16', pin: false },
      positionals: [],
    });
  });
});

describe('closestName', () => {
  it('suggests a name a typo or two away, ignoring case and dashes, and nothing for a word far from all', () => {
    expect(closestName('polcy', ['policy', 'port'])).toBe('policy');
    expect(closestName('prot', ['policy', 'port'])).toBe('port');
    expect(closestName('timeScale', ['time-scale'])).toBe('time-scale');
    expect(closestName('colour', ['policy', 'port'])).toBeUndefined();
    expect(editDistance('ab', 'ba')).toBe(1);
  });
});

describe('usageAsLaunched', () => {
  it('names the installed command when the package launcher says so', () => {
    expect(usageAsLaunched('npm run demo -- [options]', { KVROUTE_LAUNCHED_AS: 'kvroute demo' })).toBe(
      'kvroute demo [options]',
    );
    expect(usageAsLaunched('npm run demo -- [options]', {})).toBe('npm run demo -- [options]');
    expect(
      usageAsLaunched('npm run demo -- [options]   (installed: kvroute demo [options])\n\n  Runs it.', {
        KVROUTE_LAUNCHED_AS: 'kvroute demo',
      }),
    ).toBe('kvroute demo [options]\n\n  Runs it.');
  });
});
