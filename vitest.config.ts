import { readFileSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { projectTestOptions } from './vitest.shared.ts';
import { workspaceProjectDirs } from './tools/workspace-projects.mjs';

const ROOT = import.meta.dirname;

/**
 * `npm test`'s workers for the files run side by side: 4 on 2 cores. Those files spend most of their time waiting on
 * the servers, sims and timers they start: with 2 workers the cores were busy ~1 of 2 on average (user + sys CPU over
 * wall clock), with 4 ~1.3, and those files' run went from ~300 s to ~200 s (2026-12-07). Every file with a
 * wall-clock bound runs alone (RUN_ALONE), whatever this number. `KVTEST_WORKERS` overrides it (a machine
 * with more cores, or fewer files at once to chase a flaky one).
 */
const WORKERS = workersOf(process.env.KVTEST_WORKERS);

function workersOf(value: string | undefined): number {
  if (value === undefined || value === '') return 4;
  const workers = Number(value);
  if (!Number.isInteger(workers) || workers < 1) throw new Error(`KVTEST_WORKERS is "${value}": a whole number ≥ 1`);
  return workers;
}

/**
 * Test files that assert a latency or a speed on the wall clock: they run after the others, one at a time
 * (tools/run-tests.mjs, or their groups when one vitest runs both): no other test file takes the CPU from them (an
 * unrelated file's burst would decide their bound, not the code they test).
 */
const RUN_ALONE = [
  // Issue 12's acceptance 3: a router child process answers /healthz within 100 ms and a hostile body's 400 within
  // 200 ms, with 15 MB prompts and 200,000-message bodies going through it.
  'apps/router/test/hostile-clients.test.ts',
  // The sim's timing model: a prompt's engine time within ±30 % of the reference, warm ≥ 5× faster than cold.
  'apps/vllm-sim/test/timing.test.ts',
  // Hashing a 15 MB text into 2048 blocks within 200 ms.
  'libs/routing/src/prefix/block-hasher.test.ts',
  // Health pollers scraping every 300 ms: each backend once per interval, a replica's share taken over, a state
  // published, a dead backend left by the router, all within an interval or two.
  'apps/health-poller/test/replicas.test.ts',
  'apps/health-poller/test/published-state.test.ts',
  'apps/health-poller/test/router-follows-poller.test.ts',
  // A scheduler re-planned within half an interval (300 ms) by two poller replicas.
  'apps/health-poller/test/stuck-scheduler.test.ts',
  // Three replicas over one Redis: a follow-up sent the moment its answer ends must find the prefix the other
  // replica's release recorded (a race CPU starvation decides, beside other files it failed CI on 2026-12-06).
  'apps/router/test/shared-state.test.ts',
  // A SIGKILLed replica's in-flight counts healed within the lease TTL (a 5.5 s bound with router processes).
  'apps/router/test/replica-crash.test.ts',
  // A restarted engine's predictions stopped within 2 poll intervals, under load from its own clients.
  'apps/health-poller/test/engine-restart.test.ts',
  // A Redis Cluster master killed under load: every request 200, degraded at most 10 s.
  'apps/router/test/redis-cluster-failover.test.ts',
  // Mixed traffic with every kind of ending (aborts, timeouts, breaker trips) in ~4 s alone; beside the other
  // files on 2 cores it ran past its 20 s test timeout twice on 2026-12-06.
  'apps/router/test/inflight-accounting.test.ts',
  // A backend added through one replica serves the other's requests within a second: beside 3 other files on 2
  // cores the same code took 1.26 s (2026-12-07, the first run with 4 workers).
  'apps/router/test/shared-backend-set.test.ts',
  // KV-event indexers with 600 ms leases renewed every 200 ms: starved of CPU beside other files, a renewal came late,
  // the lease lapsed and a takeover test waited past its bound (twice in two runs on 2026-12-07).
  'apps/health-poller/test/kv-events-takeover.test.ts',
  'apps/health-poller/test/kv-events-replicas.test.ts',
  'apps/health-poller/test/kv-events-indexer.test.ts',
];

/**
 * The longest test files (10–40 s each on a 2-core machine, most of it waiting on the processes, sims and timers
 * they start), started first so none of them is the last one running. Vitest would order a fresh clone's files by
 * size, and these are short files; later runs it orders by the durations it cached. The ones that keep a core busy
 * (router and sim processes) alternate with the ones that mostly wait.
 */
const START_FIRST = [
  // Every npm script's --help, --version and an unknown flag: one esbuild build of every command, then 75 short node
  // processes, ~0.2 CPU-s each (a command loads its modules only once its command line is accepted): ~40 s on 2 cores
  // beside the other first files (~80 s when each ran through tsx's loader).
  'infra/test/commands-help.test.ts',
  'apps/router/test/multi-replica.test.ts',
  'bench/src/runner/local-cluster.test.ts',
  'infra/test/image-entry.test.ts',
  'apps/router/test/redis-cluster.test.ts',
  'apps/router/test/dns-discovery.test.ts',
  'apps/router/test/graceful-shutdown.test.ts',
];

/** Vitest's order (group, project, then cached durations or size), with START_FIRST moved to the front of its group. */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (spec: TestSpecification): number => {
      const index = START_FIRST.indexOf(relative(ROOT, spec.moduleId));
      return index === -1 ? START_FIRST.length : index;
    };
    return (await super.sort(files)).sort(
      (a, b) => a.project.config.sequence.groupOrder - b.project.config.sequence.groupOrder || rank(a) - rank(b),
    );
  }
}

/**
 * Workspace project folders (package.json `workspaces`) whose package.json has the script `target`: the projects
 * `nx run-many -t <target>` would run.
 */
function projectsWithScript(target: string): string[] {
  return workspaceProjectDirs(ROOT)
    .map((dir) => relative(ROOT, dir))
    .filter((dir) => JSON.parse(readFileSync(join(ROOT, dir, 'package.json'), 'utf8')).scripts?.[target] !== undefined);
}

/**
 * Which of `npm test`'s files one vitest run takes (`KVTEST_SET`, set by tools/run-tests.mjs, which runs the side-by-side
 * set, then the alone one): `alone` the RUN_ALONE files, one at a time; `side-by-side` the others, WORKERS at once;
 * unset, both in one run, the alone files in groups after the others (`npx vitest run`, `nx test <project>`). Not a KVROUTE_* name: the
 * routers the tests start warn of a KVROUTE_* variable that is none of their options.
 */
type TestSet = 'alone' | 'side-by-side' | 'all';

function testSetOf(value: string | undefined): TestSet {
  if (value === undefined || value === '') return 'all';
  if (value === 'alone' || value === 'side-by-side') return value;
  throw new Error(`KVTEST_SET is "${value}": alone, side-by-side or unset`);
}

/**
 * Every project's tests in one vitest run (tools/run-tests.mjs): one process and one pool of workers for the whole
 * workspace, where Nx ran one vitest per project, one after another. Each project gets the options its own
 * vitest.config.ts has (projectTestOptions); a project with RUN_ALONE files is two projects here, `<name>` without
 * them and `<name> (alone)` with them only, in a group of its own (one per project, in turn) with one worker. One JSON
 * report per run, test-reports/<target>/workspace[-<set>].json, which tools/test-summary.mjs splits by project folder.
 */
export default defineConfig(({ mode }) => {
  const system = mode === 'system';
  const target = system ? 'test-system' : 'test';
  const set = system ? 'all' : testSetOf(process.env.KVTEST_SET);
  /** The alone projects' groups so far (each runs after the previous one). */
  let aloneGroups = 0;
  return {
    test: {
      projects: projectsWithScript(target).flatMap((dir) => {
        const root = join(ROOT, dir);
        const options = projectTestOptions(basename(dir), mode);
        const alone = system
          ? []
          : RUN_ALONE.filter((file) => file.startsWith(`${dir}/`)).map((file) => relative(dir, file));
        const own = { root, test: { ...options, exclude: [...options.exclude, ...alone] } };
        const aloneProject = {
          root,
          test: {
            ...options,
            name: `${options.name} (alone)`,
            include: alone,
            // One at a time, each in a process of its own: nothing an earlier file left running (a timer, a server)
            // takes its CPU.
            isolate: true,
            maxWorkers: 1,
            // A group of its own too: projects of one group run side by side, so with one group for every
            // project's alone files a router's 15 MB prompts ran beside the engine-restart test's timed
            // scrapes (it failed twice so on 2026-12-07). One group per project: one alone file at a time.
            sequence: { groupOrder: ++aloneGroups },
          },
        };
        if (set === 'side-by-side' || alone.length === 0) return set === 'alone' ? [] : [own];
        return set === 'alone' ? [aloneProject] : [own, aloneProject];
      }),
      // The system tests start fleets of processes each: one file at a time, as before.
      maxWorkers: system ? 1 : WORKERS,
      sequence: { sequencer: LongestFirst },
      reporters: [
        'default',
        [
          'json',
          {
            outputFile: join(ROOT, 'test-reports', target, set === 'all' ? 'workspace.json' : `workspace-${set}.json`),
          },
        ],
      ],
    },
  };
});
