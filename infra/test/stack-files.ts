/**
 * Readers for the compose stack's files (docker-compose.yml, .env, HAProxy, Prometheus, Grafana,
 * Dockerfile), shared by the tests that keep them in step with each other and with the code.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { KvrouteApp } from './config-keys';

/**
 * The port of the router's ops listener (/metrics, the detailed /readyz) when `opsPort` is not set: the
 * router's default, which the compose stack and the manifests rely on.
 */
export const ROUTER_OPS_PORT_DEFAULT = 9464;

export const REPO_ROOT = join(import.meta.dirname, '..', '..');
export const repoPath = (...parts: string[]): string => join(REPO_ROOT, ...parts);
export const readRepoFile = (...parts: string[]): string => readFileSync(repoPath(...parts), 'utf8');

/** YAML as Compose reads it: merge keys (`<<: *anchor`) on. */
export function readYaml<T = unknown>(...parts: string[]): T {
  return parseYaml(readRepoFile(...parts), { merge: true }) as T;
}

// ---------------------------------------------------------------------------------------------------
// docker-compose.yml

export interface ComposeService {
  readonly image?: string;
  readonly build?: { context?: string; dockerfile?: string; target?: string };
  readonly command?: string[];
  readonly user?: string;
  readonly hostname?: string;
  readonly environment?: Record<string, string | number | boolean | null>;
  readonly profiles?: string[];
  readonly ports?: string[];
  readonly volumes?: string[];
  readonly depends_on?: string[] | Record<string, { condition?: string }>;
  /** A list of network names, or each network's settings. */
  readonly networks?: string[] | Record<string, { aliases?: string[]; ipv4_address?: string } | null>;
  readonly deploy?: {
    resources?: {
      reservations?: {
        devices?: Array<{ driver?: string; device_ids?: string[]; count?: number | string; capabilities?: string[] }>;
      };
    };
  };
  readonly healthcheck?: { test?: string[] };
}

export interface ComposeFile {
  readonly services: Record<string, ComposeService>;
  readonly volumes?: Record<string, unknown>;
  readonly networks?: Record<string, { ipam?: { config?: Array<{ subnet?: string }> } } | null>;
}

export const readCompose = (): ComposeFile => readYaml<ComposeFile>('docker-compose.yml');

/**
 * Compose's variable substitution with no variable set: `${NAME:-default}` and `${NAME-default}` give
 * the default, `${NAME}` and `$NAME` give '', `$$` is a literal `$`.
 */
export function interpolateDefaults(value: string): string {
  return value.replace(
    /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (match, _braced: string | undefined, fallback: string | undefined) => (match === '$$' ? '$' : (fallback ?? '')),
  );
}

/** Variables the compose file substitutes (`${NAME…}`, `$NAME`). */
export function composeVariables(text: string): string[] {
  return [
    ...new Set(
      [...text.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)|\$(?!\$)([A-Za-z_][A-Za-z0-9_]*)/g)].map(
        (match) => (match[1] ?? match[2]) as string,
      ),
    ),
  ];
}

/** A service's environment with the defaults of its `${…}` values substituted. */
export function serviceEnv(service: ComposeService): Record<string, string> {
  return Object.fromEntries(
    Object.entries(service.environment ?? {}).map(([name, value]) => [name, interpolateDefaults(String(value ?? ''))]),
  );
}

/** Which kvroute app a service runs (its command's first word), if it runs the kvroute image. */
export function kvrouteApp(service: ComposeService): KvrouteApp | null {
  if (!service.image?.startsWith('kvroute:')) return null;
  const app = service.command?.[0];
  return app === 'router' || app === 'poller' || app === 'sim' ? app : null;
}

export function servicesOf(compose: ComposeFile, app: KvrouteApp): Array<[string, ComposeService]> {
  return Object.entries(compose.services).filter(([, service]) => kvrouteApp(service) === app);
}

export function aliasesOf(service: ComposeService): string[] {
  const { networks } = service;
  if (networks === undefined || Array.isArray(networks)) return [];
  return Object.values(networks).flatMap((network) => network?.aliases ?? []);
}

/** The networks a service is on (none listed: compose's `default`). */
export function networksOf(service: ComposeService): string[] {
  const { networks } = service;
  if (networks === undefined) return ['default'];
  return Array.isArray(networks) ? networks : Object.keys(networks);
}

/** `./infra/x:/etc/y:ro` → { source: 'infra/x', target: '/etc/y' } for bind mounts. */
export function bindMounts(service: ComposeService): Array<{ source: string; target: string }> {
  return (service.volumes ?? [])
    .filter((volume) => volume.startsWith('./'))
    .map((volume) => {
      const [source = '', target = ''] = volume.split(':');
      return { source: source.replace(/^\.\//, ''), target };
    });
}

/** The word after `flag` in a command (`--port 8000` → '8000'), or undefined when the flag is not there. */
export function flagValue(command: readonly string[], flag: string): string | undefined {
  const at = command.indexOf(flag);
  return at < 0 ? undefined : command[at + 1];
}

/**
 * The Compose defaults shipped as `.env.example`, which the README's setup copies to `.env` (untracked:
 * the setup appends the Redis password to it).
 */
export const ENV_EXAMPLE_FILE = '.env.example';

export function readEnvExample(): Record<string, string> {
  return Object.fromEntries(
    readRepoFile(ENV_EXAMPLE_FILE)
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
}

// ---------------------------------------------------------------------------------------------------
// HAProxy

export interface HaproxySection {
  readonly kind: string;
  readonly name: string;
  readonly lines: readonly string[];
}

/** haproxy.cfg as sections (`global`, `defaults`, `frontend NAME`, …) of keyword lines, comments dropped. */
export function parseHaproxyConfig(text: string): HaproxySection[] {
  const sections: Array<{ kind: string; name: string; lines: string[] }> = [];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/(^|\s)#.*$/, '').trimEnd();
    if (line.trim() === '') continue;
    if (!/^\s/.test(line)) {
      const [kind = '', name = ''] = line.trim().split(/\s+/);
      sections.push({ kind, name, lines: [] });
    } else {
      sections.at(-1)?.lines.push(line.trim().replace(/\s+/g, ' '));
    }
  }
  return sections;
}

export function haproxySection(sections: readonly HaproxySection[], kind: string, name = ''): HaproxySection {
  const section = sections.find((candidate) => candidate.kind === kind && candidate.name === name);
  if (!section) throw new Error(`haproxy.cfg has no "${kind} ${name}" section`);
  return section;
}

// ---------------------------------------------------------------------------------------------------
// Prometheus and Grafana

export interface PrometheusConfig {
  readonly rule_files?: string[];
  readonly scrape_configs: Array<{ job_name: string; static_configs?: Array<{ targets: string[] }> }>;
}

export interface AlertRule {
  readonly alert?: string;
  readonly record?: string;
  readonly expr: string;
  readonly for?: string;
  readonly labels?: Record<string, string>;
  readonly annotations?: Record<string, string>;
}

export interface RuleFile {
  readonly groups: Array<{ name: string; rules: AlertRule[] }>;
}

export interface GrafanaTarget {
  readonly refId: string;
  readonly expr?: string;
  readonly datasource?: { type?: string; uid?: string };
}

export interface GrafanaPanel {
  readonly id: number;
  readonly type: string;
  readonly title: string;
  readonly gridPos: { h: number; w: number; x: number; y: number };
  readonly datasource?: { type?: string; uid?: string };
  readonly targets?: GrafanaTarget[];
  readonly panels?: GrafanaPanel[];
}

export interface GrafanaDashboard {
  readonly uid: string;
  readonly title: string;
  readonly panels: GrafanaPanel[];
}

/** Every panel, rows' nested panels included. */
export function allPanels(dashboard: GrafanaDashboard): GrafanaPanel[] {
  return dashboard.panels.flatMap((panel) => [panel, ...(panel.panels ?? [])]);
}

export function dashboardExpressions(dashboard: GrafanaDashboard): Array<{ where: string; expr: string }> {
  return allPanels(dashboard).flatMap((panel) =>
    (panel.targets ?? [])
      .filter((target) => target.expr !== undefined)
      .map((target) => ({ where: `panel "${panel.title}" ${target.refId}`, expr: target.expr as string })),
  );
}

export function alertExpressions(rules: RuleFile): Array<{ where: string; expr: string }> {
  return rules.groups.flatMap((group) =>
    group.rules.map((rule) => ({ where: `${group.name}/${rule.alert ?? rule.record}`, expr: rule.expr })),
  );
}

// ---------------------------------------------------------------------------------------------------
// Dockerfile

export interface DockerInstruction {
  readonly keyword: string;
  readonly args: string;
  readonly line: number;
}

export interface DockerStage {
  readonly name: string | null;
  readonly from: string;
  readonly instructions: readonly DockerInstruction[];
}

/** Instructions (continuations joined, comments dropped) grouped by build stage. */
export function parseDockerfile(text: string): { args: DockerInstruction[]; stages: DockerStage[] } {
  const instructions: DockerInstruction[] = [];
  let pending = '';
  let startLine = 0;
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (pending === '' && (line === '' || line.startsWith('#'))) return;
    if (pending === '') startLine = index + 1;
    if (line.startsWith('#')) return;
    if (line.endsWith('\\')) {
      pending += `${line.slice(0, -1)} `;
      return;
    }
    const whole = (pending + line).trim();
    pending = '';
    const [keyword = '', ...rest] = whole.split(/\s+/);
    instructions.push({ keyword: keyword.toUpperCase(), args: rest.join(' '), line: startLine });
  });
  const preamble: DockerInstruction[] = [];
  const stages: Array<{ name: string | null; from: string; instructions: DockerInstruction[] }> = [];
  for (const instruction of instructions) {
    if (instruction.keyword === 'FROM') {
      const match = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$/i.exec(instruction.args);
      stages.push({ from: match?.[1] ?? instruction.args, name: match?.[2] ?? null, instructions: [] });
    } else if (stages.length === 0) {
      preamble.push(instruction);
    } else {
      stages.at(-1)?.instructions.push(instruction);
    }
  }
  return { args: preamble, stages };
}

/** The JSON-array (exec) form of CMD/ENTRYPOINT/HEALTHCHECK CMD arguments. */
export function execForm(args: string): string[] {
  const start = args.indexOf('[');
  return JSON.parse(args.slice(start)) as string[];
}

// ---------------------------------------------------------------------------------------------------
// Docs

/** GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens. */
export function headingAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors of every heading of a Markdown file of the repository (outside code fences). */
export function markdownAnchors(path: string): Set<string> {
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of readRepoFile(path).split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.*)$/.exec(line);
    if (heading?.[1] !== undefined) anchors.add(headingAnchor(heading[1]));
  }
  return anchors;
}
