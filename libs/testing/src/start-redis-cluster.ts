import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { CLUSTER_SLOT_COUNT, clusterKeySlot } from './cluster-key-slot';
import { probeDocker } from './docker-probe';
import { processWide } from './process-wide';
import {
  findFreePorts,
  killChildOnProcessExit,
  startLocalRedisServer,
  type LocalRedisServer,
} from './local-redis-server';

/** Binary that forms the cluster (`redis-cli --cluster create`); override with env `REDIS_CLI_BIN`. */
export const REDIS_CLI_BIN = process.env['REDIS_CLI_BIN'] ?? 'redis-cli';

const HOST = '127.0.0.1';
const DEFAULT_MASTERS = 3;
const DEFAULT_REPLICAS_PER_MASTER = 1;
/** Short, so a killed master is declared failed (and its replica promoted) within a few seconds of a test. */
const DEFAULT_NODE_TIMEOUT_MS = 2_000;
const DEFAULT_READY_TIMEOUT_MS = 30_000;
const POLL_INTERVAL_MS = 100;
/** Per check connection and per command, so one stuck node cannot stall a waitForClusterOk() round past ~2 s. */
const CHECK_TIMEOUT_MS = 1_000;
/** A free port can be taken between findFreePorts and the spawn; a node is retried on fresh ports that many times. */
const NODE_START_ATTEMPTS = 3;
const OUTPUT_TAIL_CHARS = 4_000;

export type RedisClusterRole = 'master' | 'replica';

export interface RedisClusterNode {
  readonly host: string;
  readonly port: number;
  /** `redis://127.0.0.1:<port>`: this node alone; a plain client gets `MOVED` for slots it does not serve. */
  readonly url: string;
  /** As last observed: when the cluster was formed and by each waitForClusterOk(). A failover changes it, a kill does not. */
  readonly role: RedisClusterRole;
  /** True while its process runs: false after killNode() until restartNode(). */
  readonly running: boolean;
}

export interface TestRedisCluster {
  /** Every node, masters and replicas, in the order they were started; killed ones included. */
  readonly nodes: ReadonlyArray<RedisClusterNode>;
  /** `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…`: the running masters as last observed. */
  readonly url: string;
  /** Startup nodes for a cluster client (ioredis `new Cluster(seeds)`): every running node, a fresh array each time. */
  readonly seeds: Array<{ host: string; port: number }>;
  /** The temp dir holding one dir per node (its `nodes.conf`); removed by stop(). */
  readonly dir: string;
  /** `cluster-node-timeout` of every node: how long a silent node takes to be suspected, in ms. */
  readonly nodeTimeoutMs: number;
  /**
   * The master serving a slot (0..16383) or a key's slot (see clusterKeySlot), as last observed: after a failover,
   * call waitForClusterOk() first, or this still names the dead master.
   */
  masterOf(slotOrKey: number | string): RedisClusterNode;
  /** SIGKILL one node and wait for its exit (failover tests). No-op if it is not running. */
  killNode(port: number): Promise<void>;
  /**
   * Starts the node again on its port with its own `nodes.conf` (SIGTERM first if it runs), so it rejoins as what the
   * cluster now says it is (a master that was failed over comes back as a replica). Resolves once it answers PING;
   * waitForClusterOk() waits for the rejoin.
   */
  restartNode(port: number): Promise<void>;
  /**
   * Resolves once every running node says `cluster_state:ok` with all 16384 slots ok, all of them report the same
   * slot map with every slot on a running master, and each one's own role (ROLE) matches that map, replicas with
   * their link to the master up. Right after killNode() every node still says ok until the node timeout passes, so
   * this waits for the dead master's slots to move rather than returning at once. Rejects after `timeoutMs`
   * (default 30 s, plus at most one check round) with the last reason it was not ok.
   */
  waitForClusterOk(timeoutMs?: number): Promise<void>;
  /** SIGTERM every node, wait for them to exit, remove the temp dir. Idempotent. */
  stop(): Promise<void>;
}

export interface StartRedisClusterOptions {
  /** Masters, each serving an even share of the slots. Default 3, the least `redis-cli --cluster create` accepts. */
  masters?: number;
  /** Replicas of each master. Default 1; 0 gives a cluster that cannot survive losing a master. */
  replicasPerMaster?: number;
  /** `cluster-node-timeout` in ms. Default 2000: a killed master is replaced within about 2-5 s. */
  nodeTimeoutMs?: number;
  /** Bound on `redis-cli --cluster create` plus the first waitForClusterOk(), in ms. Default 30 000. */
  readyTimeoutMs?: number;
  /** Receives the one line saying what was started and why. Default `console.info`. */
  logger?: (line: string) => void;
}

/** Temp dirs of clusters not yet stopped; removed if the process exits first (after the exit hook killed the nodes). */
const liveClusterDirs = processWide('live-cluster-dirs', () => {
  const dirs = new Set<string>();
  process.on('exit', () => {
    for (const dir of dirs) {
      try {
        rmSync(dir, { recursive: true, force: true });
      } catch {
        // A node killed a moment ago may still be writing its nodes.conf: a stray temp dir, nothing worse.
      }
    }
  });
  return dirs;
});

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const errorText = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/** Flags that make a plain local redis-server a cluster node whose state lives in `dir`. */
function clusterNodeArgs(dir: string, busPort: number, nodeTimeoutMs: number): string[] {
  return [
    '--cluster-enabled',
    'yes',
    '--cluster-config-file',
    join(dir, 'nodes.conf'),
    '--cluster-node-timeout',
    String(nodeTimeoutMs),
    // Explicit, because the default (port + 10000) overflows 65535 for the high ports findFreePorts hands out.
    '--cluster-port',
    String(busPort),
    // A replica may always fail over: tests kill masters at any moment, however long a replica's link was down.
    '--cluster-replica-validity-factor',
    '0',
    // A (re)joining replica syncs at once; the default waits 5 s for more replicas to share one transfer.
    '--repl-diskless-sync-delay',
    '0',
    // CLUSTER SLOTS (what waitForClusterOk and cluster clients read) omits a replica until its replication offset
    // leaves 0, which on an idle master happens at the master's first replication PING: 10 s by default.
    '--repl-ping-replica-period',
    '1',
    // stop() signals masters and replicas together; a master must not wait for replicas that are exiting too.
    '--shutdown-timeout',
    '0',
    '--dir',
    dir,
  ];
}

/** One cluster node in `dir`: on the given ports first, then on fresh ones if those were taken meanwhile. */
async function startClusterNode(
  dir: string,
  ports: { port: number; busPort: number },
  nodeTimeoutMs: number,
): Promise<LocalRedisServer> {
  let lastError: unknown;
  let { port, busPort } = ports;
  for (let attempt = 0; attempt < NODE_START_ATTEMPTS; attempt++) {
    if (attempt > 0) [port, busPort] = (await findFreePorts(2)) as [number, number];
    try {
      return await startLocalRedisServer({ port, extraArgs: clusterNodeArgs(dir, busPort, nodeTimeoutMs) });
    } catch (error) {
      lastError = error;
    }
  }
  throw lastError;
}

/**
 * `redis-cli --cluster create`: redis-cli chooses which nodes become masters (an even share of the slots each) and
 * which replicate them; roles are read back from the nodes afterwards, never assumed from the order.
 */
function formCluster(ports: readonly number[], replicasPerMaster: number, timeoutMs: number): Promise<void> {
  const args = [
    '--cluster',
    'create',
    ...ports.map((port) => `${HOST}:${port}`),
    '--cluster-replicas',
    String(replicasPerMaster),
    '--cluster-yes',
  ];
  return new Promise((resolve, reject) => {
    const child = execFile(
      REDIS_CLI_BIN,
      args,
      { timeout: timeoutMs, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => {
        if (!error) return resolve();
        const output = `${stdout}${stderr}`.trim().slice(-OUTPUT_TAIL_CHARS);
        const hint =
          (error as NodeJS.ErrnoException).code === 'ENOENT'
            ? ' (is redis-cli installed? set REDIS_CLI_BIN to its path)'
            : '';
        const why = error.killed ? `did not finish within ${timeoutMs} ms` : `failed: ${error.message}${hint}`;
        reject(new Error(`redis-cli --cluster create ${why}\n${output}`));
      },
    );
    killChildOnProcessExit(child);
  });
}

interface SlotRange {
  first: number;
  last: number;
  masterPort: number;
  /** Sorted, so two nodes listing the same replicas in another order still agree. */
  replicaPorts: number[];
}

type OwnRole = { role: 'master' } | { role: 'replica'; masterPort: number; link: string };

interface NodeReport {
  port: number;
  info: Map<string, string>;
  ranges: SlotRange[];
  ownRole: OwnRole;
}

/** What waitForClusterOk() last saw: the slot map all running nodes agreed on and each running node's own role. */
interface ClusterView {
  ranges: SlotRange[];
  roles: Map<number, RedisClusterRole>;
}

type CheckOutcome = { ok: true; view: ClusterView } | { ok: false; reason: string };

function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

function parseSlots(reply: ReadonlyArray<readonly unknown[]>): SlotRange[] {
  return reply
    .map(([first, last, master, ...replicas]) => ({
      first: Number(first),
      last: Number(last),
      masterPort: Number((master as unknown[])[1]),
      replicaPorts: replicas.map((replica) => Number((replica as unknown[])[1])).sort((a, b) => a - b),
    }))
    .sort((a, b) => a.first - b.first);
}

/** ROLE: `['master', offset, replicas]` or `['slave', masterIp, masterPort, linkState, offset]`. */
function parseRole(reply: readonly unknown[]): OwnRole {
  if (reply[0] === 'slave') return { role: 'replica', masterPort: Number(reply[2]), link: String(reply[3]) };
  return { role: 'master' };
}

const slotMapSignature = (ranges: readonly SlotRange[]): string =>
  ranges.map((range) => `${range.first}-${range.last}@${range.masterPort}<${range.replicaPorts.join(',')}>`).join(' ');

async function reportOf(port: number): Promise<NodeReport> {
  const redis = new Redis({
    host: HOST,
    port,
    lazyConnect: true,
    enableReadyCheck: false,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    connectTimeout: CHECK_TIMEOUT_MS,
    commandTimeout: CHECK_TIMEOUT_MS,
  });
  // Failures surface as rejected commands; without a listener ioredis would also print each one.
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    const [info, slots, role] = await Promise.all([redis.cluster('INFO'), redis.cluster('SLOTS'), redis.role()]);
    return { port, info: parseInfo(info), ranges: parseSlots(slots), ownRole: parseRole(role) };
  } finally {
    redis.disconnect();
  }
}

/** One round of waitForClusterOk(): ok, or the first reason found why not (for its timeout message). */
async function checkCluster(runningPorts: readonly number[]): Promise<CheckOutcome> {
  if (runningPorts.length === 0) return { ok: false, reason: 'no node is running' };
  const settled = await Promise.allSettled(runningPorts.map((port) => reportOf(port)));
  const reports: NodeReport[] = [];
  for (const [index, result] of settled.entries()) {
    if (result.status === 'rejected')
      return { ok: false, reason: `port ${runningPorts[index]} did not answer: ${errorText(result.reason)}` };
    reports.push(result.value);
  }

  for (const report of reports) {
    const state = report.info.get('cluster_state');
    const slotsOk = Number(report.info.get('cluster_slots_ok') ?? 0);
    if (state !== 'ok' || slotsOk !== CLUSTER_SLOT_COUNT) {
      return {
        ok: false,
        reason: `port ${report.port} says cluster_state:${state}, ${slotsOk} of ${CLUSTER_SLOT_COUNT} slots ok`,
      };
    }
  }

  const [reference, ...others] = reports as [NodeReport, ...NodeReport[]];
  const signature = slotMapSignature(reference.ranges);
  const disagreeing = others.find((report) => slotMapSignature(report.ranges) !== signature);
  if (disagreeing)
    return { ok: false, reason: `ports ${reference.port} and ${disagreeing.port} report different slot maps` };

  const running = new Set(runningPorts);
  const deadOwner = reference.ranges.find((range) => !running.has(range.masterPort));
  if (deadOwner) {
    return {
      ok: false,
      reason: `slots ${deadOwner.first}-${deadOwner.last} still on port ${deadOwner.masterPort}, which is not running`,
    };
  }

  const roles = new Map<number, RedisClusterRole>();
  for (const report of reports) {
    const own = report.ownRole;
    if (own.role === 'master') {
      if (!reference.ranges.some((range) => range.masterPort === report.port)) {
        return { ok: false, reason: `port ${report.port} says it is a master but serves no slots in the agreed map` };
      }
    } else {
      if (own.link !== 'connected')
        return { ok: false, reason: `port ${report.port} replicates port ${own.masterPort}, link ${own.link}` };
      const underItsMaster = reference.ranges.some(
        (range) => range.masterPort === own.masterPort && range.replicaPorts.includes(report.port),
      );
      if (!underItsMaster)
        return {
          ok: false,
          reason: `port ${report.port} replicates port ${own.masterPort}, which the slot map does not show yet`,
        };
    }
    roles.set(report.port, own.role);
  }
  return { ok: true, view: { ranges: reference.ranges, roles } };
}

class ClusterMember implements RedisClusterNode {
  readonly host = HOST;
  readonly url: string;
  /** Replaced by the first observation, before startRedisCluster() returns. */
  role: RedisClusterRole = 'master';

  constructor(readonly server: LocalRedisServer) {
    this.url = `redis://${HOST}:${server.port}`;
  }

  get port(): number {
    return this.server.port;
  }

  get running(): boolean {
    return this.server.running;
  }
}

class LocalRedisCluster implements TestRedisCluster {
  private readonly members: ClusterMember[];
  private ranges: SlotRange[] = [];
  private stopping: Promise<void> | undefined;

  constructor(
    servers: readonly LocalRedisServer[],
    readonly dir: string,
    readonly nodeTimeoutMs: number,
  ) {
    this.members = servers.map((server) => new ClusterMember(server));
  }

  get nodes(): ReadonlyArray<RedisClusterNode> {
    return this.members;
  }

  get url(): string {
    const masters = this.members.filter((member) => member.role === 'master' && member.running);
    return `redis+cluster://${masters.map((member) => `${HOST}:${member.port}`).join(',')}`;
  }

  get seeds(): Array<{ host: string; port: number }> {
    return this.members.filter((member) => member.running).map((member) => ({ host: HOST, port: member.port }));
  }

  masterOf(slotOrKey: number | string): RedisClusterNode {
    const slot = typeof slotOrKey === 'string' ? clusterKeySlot(slotOrKey) : slotOrKey;
    if (!Number.isInteger(slot) || slot < 0 || slot >= CLUSTER_SLOT_COUNT)
      throw new RangeError(`not a slot (0..${CLUSTER_SLOT_COUNT - 1}): ${slot}`);
    const range = this.ranges.find((candidate) => candidate.first <= slot && slot <= candidate.last);
    if (!range) throw new Error(`slot ${slot} has no master in the last observed slot map`);
    return this.memberAt(range.masterPort);
  }

  async killNode(port: number): Promise<void> {
    this.assertNotStopped('killNode');
    await this.memberAt(port).server.kill();
  }

  async restartNode(port: number): Promise<void> {
    this.assertNotStopped('restartNode');
    await this.memberAt(port).server.restart();
  }

  async waitForClusterOk(timeoutMs = DEFAULT_READY_TIMEOUT_MS): Promise<void> {
    this.assertNotStopped('waitForClusterOk');
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const runningPorts = this.members.filter((member) => member.running).map((member) => member.port);
      const outcome = await checkCluster(runningPorts);
      if (outcome.ok) {
        this.ranges = outcome.view.ranges;
        for (const member of this.members) member.role = outcome.view.roles.get(member.port) ?? member.role;
        return;
      }
      if (Date.now() >= deadline) throw new Error(`Redis Cluster was not ok within ${timeoutMs} ms: ${outcome.reason}`);
      await delay(POLL_INTERVAL_MS);
    }
  }

  stop(): Promise<void> {
    this.stopping ??= (async () => {
      await Promise.all(this.members.map((member) => member.server.stop()));
      await rm(this.dir, { recursive: true, force: true });
      liveClusterDirs.delete(this.dir);
    })();
    return this.stopping;
  }

  private memberAt(port: number): ClusterMember {
    const member = this.members.find((candidate) => candidate.port === port);
    if (!member)
      throw new Error(
        `no node of this cluster on port ${port} (its ports: ${this.members.map((m) => m.port).join(', ')})`,
      );
    return member;
  }

  private assertNotStopped(operation: string): void {
    if (this.stopping) throw new Error(`${operation}() after stop(): this Redis Cluster is gone`);
  }
}

function checkedCount(name: string, value: number, min: number): number {
  if (!Number.isInteger(value) || value < min)
    throw new RangeError(`startRedisCluster: ${name} must be an integer >= ${min}, got ${value}`);
  return value;
}

/**
 * A real Redis Cluster for tests: `masters` × (1 + `replicasPerMaster`) local `redis-server` processes on free
 * loopback ports, each with its own temp dir and `nodes.conf`, joined by `redis-cli --cluster create`, returned once
 * waitForClusterOk() holds. Logs one line saying what it started and why. Always local processes, even where a Docker
 * engine answers: cluster nodes in containers announce addresses that a client on the host cannot follow through
 * `MOVED` without a NAT map. Every node is SIGKILLed if the test process exits without stop().
 */
export async function startRedisCluster(options: StartRedisClusterOptions = {}): Promise<TestRedisCluster> {
  const log = options.logger ?? ((line: string) => console.info(line));
  const masters = checkedCount('masters', options.masters ?? DEFAULT_MASTERS, 3);
  const replicasPerMaster = checkedCount(
    'replicasPerMaster',
    options.replicasPerMaster ?? DEFAULT_REPLICAS_PER_MASTER,
    0,
  );
  const nodeTimeoutMs = checkedCount('nodeTimeoutMs', options.nodeTimeoutMs ?? DEFAULT_NODE_TIMEOUT_MS, 1);
  const readyTimeoutMs = checkedCount('readyTimeoutMs', options.readyTimeoutMs ?? DEFAULT_READY_TIMEOUT_MS, 1);
  const nodeCount = masters * (1 + replicasPerMaster);
  const startedAt = Date.now();

  // Probed only to say truthfully why local processes are used; an absent engine answers within 500 ms.
  const dockerAnswered = probeDocker();
  const dir = await mkdtemp(join(tmpdir(), 'kvroute-redis-cluster-'));
  liveClusterDirs.add(dir);

  const servers: LocalRedisServer[] = [];
  try {
    // Client and bus ports from one call, so none of the 2 × nodeCount is handed out twice.
    const ports = await findFreePorts(2 * nodeCount);
    const started = await Promise.allSettled(
      Array.from({ length: nodeCount }, async (_, index) => {
        const nodeDir = join(dir, `node-${index}`);
        await mkdir(nodeDir);
        return startClusterNode(
          nodeDir,
          { port: ports[index] as number, busPort: ports[nodeCount + index] as number },
          nodeTimeoutMs,
        );
      }),
    );
    for (const result of started) if (result.status === 'fulfilled') servers.push(result.value);
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;

    // At least 1 ms: execFile reads a timeout of 0 as none.
    const readyBudgetLeftMs = (): number => Math.max(1, readyTimeoutMs - (Date.now() - startedAt));
    await formCluster(
      servers.map((server) => server.port),
      replicasPerMaster,
      readyBudgetLeftMs(),
    );
    const cluster = new LocalRedisCluster(servers, dir, nodeTimeoutMs);
    await cluster.waitForClusterOk(readyBudgetLeftMs());

    const portsWith = (role: RedisClusterRole): string =>
      cluster.nodes
        .filter((node) => node.role === role)
        .map((node) => node.port)
        .join(', ');
    const why = (await dockerAnswered)
      ? 'a Docker engine answered /_ping, but nodes in containers would announce addresses a host client cannot follow'
      : 'no Docker engine answered /_ping';
    const seconds = ((Date.now() - startedAt) / 1000).toFixed(1);
    log(
      `[testing] Redis Cluster: ${masters} masters + ${masters * replicasPerMaster} replicas of local redis-server ` +
        `(masters on ports ${portsWith('master')}; replicas on ${portsWith('replica') || 'none'}; ready in ${seconds} s; ${why})`,
    );
    return cluster;
  } catch (error) {
    await Promise.all(servers.map((server) => server.stop()));
    await rm(dir, { recursive: true, force: true });
    liveClusterDirs.delete(dir);
    throw error;
  }
}
