import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REQUEST_PATH_STAGES } from './request-path';

const PIPELINE = import.meta.dirname;
const REPOSITORY = join(PIPELINE, '..', '..', '..', '..');

/** The stages as the code lists them: `1. admit`, `2. parse`, …, the one order every place below must show. */
const NUMBERED = REQUEST_PATH_STAGES.map((stage, index) => `${index + 1}. ${stage}`);

/** `number. name` pairs from the matches of `pattern` (capture groups: number, name). */
function numberedIn(text: string, pattern: RegExp): string[] {
  return [...text.matchAll(pattern)].map((match) => `${match[1]}. ${match[2]}`);
}

describe('the request path as documented: one stage list, REQUEST_PATH_STAGES', () => {
  it('is numbered the same in the stage table of request-path.ts, each row naming its file', () => {
    const source = readFileSync(join(PIPELINE, 'request-path.ts'), 'utf8');
    // Rows of the doc comment's table: ` * | 1 | admit   | admit.ts              | …`
    const rows = [...source.matchAll(/^ \* \| (\d) \| (\w+) +\| ([\w-]+\.ts) +\|/gm)];
    expect(rows.map((row) => `${row[1]}. ${row[2]}`)).toEqual(NUMBERED);
    for (const row of rows) expect(row[3]).toBe(`${row[2]}.ts`);
  });

  it("is numbered the same in each stage file's header (`Stage N of the request path, **name**`)", () => {
    for (const [index, stage] of REQUEST_PATH_STAGES.entries()) {
      const file = join(PIPELINE, `${stage}.ts`);
      expect(existsSync(file), `pipeline/${stage}.ts`).toBe(true);
      const headers = numberedIn(readFileSync(file, 'utf8'), /Stage (\d+) of the request path, \*\*(\w+)\*\*/g);
      expect(headers, `pipeline/${stage}.ts`).toEqual([`${index + 1}. ${stage}`]);
    }
    // No other file claims to be a stage.
    const others = readdirTs().filter((name) => !REQUEST_PATH_STAGES.some((stage) => name === `${stage}.ts`));
    for (const name of others)
      expect(readFileSync(join(PIPELINE, name), 'utf8'), name).not.toMatch(/Stage \d+ of the request path/);
  });

  it('is numbered the same in apps/router/README.md, each row with its file', () => {
    const readme = readFileSync(join(PIPELINE, '..', '..', 'README.md'), 'utf8');
    // Rows of the stage table: | 1 | **admit** | `pipeline/admit.ts` | …
    const rows = [...readme.matchAll(/^\| (\d) \| \*\*(\w+)\*\* \| `(pipeline\/[\w-]+\.ts)`/gm)];
    expect(rows.map((row) => `${row[1]}. ${row[2]}`)).toEqual(NUMBERED);
    for (const row of rows) expect(row[3]).toBe(`pipeline/${row[2]}.ts`);
    expect(readme).toContain(`goes through ${numberWord(REQUEST_PATH_STAGES.length)} stages`);
  });

  it('is numbered the same in docs/architecture.md', () => {
    const architecture = readFileSync(join(REPOSITORY, 'docs', 'architecture.md'), 'utf8');
    const start = architecture.indexOf('**Request path**');
    const end = architecture.indexOf('**State path**');
    expect(start).toBeGreaterThan(-1);
    expect(end).toBeGreaterThan(start);
    const section = architecture.slice(start, end);
    expect(numberedIn(section, /^(\d+)\. \*\*(\w+)\*\*/gm)).toEqual(NUMBERED);
    expect(section).toContain(`${numberWord(REQUEST_PATH_STAGES.length)} stages`);
  });
});

/** The pipeline folder's source files (tests left out). */
function readdirTs(): string[] {
  return readdirSync(PIPELINE).filter((name) => name.endsWith('.ts') && !name.endsWith('.test.ts'));
}

function numberWord(count: number): string {
  const words = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten'];
  return words[count] ?? String(count);
}
