/**
 * Compares two CPU profiles of the router (or any bundled app) by original source file
 * (`npm run bench:profile-diff`): which files' code grew or shrank between two builds, where the bundles'
 * function names do not line up. Profiles come from `node --cpu-prof --cpu-prof-dir=DIR dist/router.mjs …`
 * (written when the process exits: stop it with SIGTERM) under the same load on both builds, e.g. a
 * `git worktree` of the commit before a change and this checkout; each bundle's `.map` sits beside it.
 *
 * Usage: npm run bench:profile-diff -- --before A.cpuprofile --before-map /wt/dist/router.mjs.map
 *        --after B.cpuprofile --after-map dist/router.mjs.map [--requests N] [--top 40]
 * `--requests`: the requests each profile covers, to print µs per request beside the totals.
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { SourceMapConsumer } from 'source-map-js';
import { compareBySource, selfTimeBySource, type CpuProfile, type SelfTimeBySource } from './cpu-profile-by-source';

const args = parseCommandLine({
  usage: 'npm run bench:profile-diff -- --before P --before-map M --after P --after-map M [options]',
  summary: 'Self time of two CPU profiles (node --cpu-prof) by original source file, via the bundles’ source maps.',
  options: {
    before: { type: 'string', default: '', description: 'the first build’s .cpuprofile' },
    'before-map': { type: 'string', default: '', description: 'its bundle’s source map (dist/<app>.mjs.map)' },
    after: { type: 'string', default: '', description: 'the second build’s .cpuprofile' },
    'after-map': { type: 'string', default: '', description: 'its bundle’s source map' },
    requests: { type: 'string', default: '0', value: 'number', description: 'requests per profile (0: totals only)' },
    top: { type: 'string', default: '40', value: 'number', description: 'rows shown' },
  },
});

for (const name of ['before', 'before-map', 'after', 'after-map'] as const) {
  if (args[name] === '') {
    console.error(`--${name} is required (npm run bench:profile-diff -- --help)`);
    process.exit(2);
  }
}

function bySource(profilePath: string, mapPath: string): SelfTimeBySource {
  const profile = JSON.parse(readFileSync(profilePath, 'utf8')) as CpuProfile;
  const map = new SourceMapConsumer(JSON.parse(readFileSync(mapPath, 'utf8')));
  const bundle = basename(mapPath).replace(/\.map$/, '');
  return selfTimeBySource(profile, bundle, (line, column) => map.originalPositionFor({ line, column }).source);
}

const before = bySource(args.before, args['before-map']);
const after = bySource(args.after, args['after-map']);
const requests = Number(args.requests);
const perRequest = (ms: number): string => (requests > 0 ? ` (${((ms * 1000) / requests).toFixed(1)} µs/req)` : '');
const busyMs = (side: SelfTimeBySource): number => side.busyUs / 1000;
console.log(
  `busy: ${busyMs(before).toFixed(0)} ms${perRequest(busyMs(before))} → ${busyMs(after).toFixed(0)} ms${perRequest(busyMs(after))}\n`,
);
console.log('| source | before ms | after ms | change ms |');
console.log('|---|--:|--:|--:|');
for (const row of compareBySource(before, after).slice(0, Number(args.top))) {
  const sign = row.changeMs >= 0 ? '+' : '';
  console.log(
    `| ${row.source} | ${row.beforeMs.toFixed(1)} | ${row.afterMs.toFixed(1)} | ${sign}${row.changeMs.toFixed(1)}${perRequest(row.changeMs)} |`,
  );
}
