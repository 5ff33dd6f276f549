/**
 * Checks a built set of Kubernetes objects (infra/k8s, after kustomize) for what a cluster would only
 * tell us at run time, or not at all:
 *
 * - every object against the Kubernetes schema of its kind (kubernetes-models: types and required fields);
 * - references: Service selectors and target ports, StatefulSet services, PDB and HPA targets, volumes,
 *   ConfigMap keys, Secrets, PVCs, probe ports, `$(VAR)` in args, selectors vs pod labels, namespaces;
 * - each kvroute container (image ghcr.io/kvroute/kvroute): its first arg names an app, it sets only env
 *   vars that app reads, and its configuration loads with the app's own loader (the mounted kvroute.yaml,
 *   env, flags) the way main.ts would load it; the listening port and host match the pod; Redis and every
 *   backend URL resolve to a Service or a StatefulSet pod of the same manifests; the probes use the app's
 *   endpoints; the grace period outlasts shutdownGraceMs; the bench's flags, scenario and output volume;
 * - kvroute.yaml in a ConfigMap: every top-level key is a router or poller key, `router:` holds router
 *   keys, `poller:` poller keys.
 *
 * `checkManifests` returns one line per problem; an empty list means none found.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, posix } from 'node:path';
import { parseArgs } from 'node:util';
import { POLLER_CONFIG_FILE, POLLER_ENV_PREFIX, PollerConfig } from '@kvroute/health-poller/config';
import { loadConfig, type ConfigSchema, type SharedConfigFile } from '@kvroute/platform';
import { ROUTER_CONFIG_FILE, ROUTER_ENV_PREFIX, RouterConfig } from '@kvroute/router/config';
import { SIM_ENV_PREFIX, SimConfig } from '@kvroute/vllm-sim/config';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Job } from 'kubernetes-models/batch/v1';
import {
  PodMonitor,
  PrometheusRule,
  ServiceMonitor,
} from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import {
  ConfigMap,
  Namespace,
  PersistentVolumeClaim,
  Pod,
  Secret,
  Service,
  ServiceAccount,
} from 'kubernetes-models/v1';
import { parse as parseYaml } from 'yaml';
import { unknownConfigKeys, unknownEnvVars, type KvrouteApp } from './config-keys';
import { podSpecsOf, type K8sObject } from './k8s-kustomize';
import { repoPath, ROUTER_OPS_PORT_DEFAULT } from './stack-files';

export const KVROUTE_IMAGE = 'ghcr.io/kvroute/kvroute';
export const KVROUTE_COMMANDS = ['router', 'poller', 'sim', 'bench'] as const;
export type KvrouteCommand = (typeof KVROUTE_COMMANDS)[number];

/** The flags of `npm run bench` (bench/src/bench.ts `parseArgs` options). */
const BENCH_OPTIONS = {
  scenario: { type: 'string' },
  policies: { type: 'string' },
  seeds: { type: 'string' },
  sweep: { type: 'string' },
  out: { type: 'string' },
  'data-dir': { type: 'string' },
  'write-trace': { type: 'string' },
  router: { type: 'string' },
  backends: { type: 'string' },
  'reset-cache': { type: 'boolean' },
  'salt-runs': { type: 'boolean' },
  'router-redis': { type: 'string' },
  'ignore-eos': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;
/** The one kvroute env var the bench reads (local clusters only). */
const BENCH_ENV = new Set(['KVROUTE_REDIS_URL']);

/** How each app loads its configuration (as in its main.ts). */
const APP_CONFIG: Record<
  KvrouteApp,
  {
    schema: ConfigSchema;
    envPrefix: string;
    sharedFile?: SharedConfigFile;
    /**
     * The paths the probes ask, and the listener serving them: `main` (the app's `host`/`port`) or `ops`
     * (the router's operations listener, `opsHost`/`opsPort`: /metrics and the detailed /readyz, kept
     * off the API port).
     */
    probes: { readiness: string; liveness: string; listener: 'main' | 'ops' };
  }
> = {
  router: {
    schema: RouterConfig,
    envPrefix: ROUTER_ENV_PREFIX,
    sharedFile: ROUTER_CONFIG_FILE,
    probes: { readiness: '/readyz', liveness: '/healthz', listener: 'ops' },
  },
  poller: {
    schema: PollerConfig,
    envPrefix: POLLER_ENV_PREFIX,
    sharedFile: POLLER_CONFIG_FILE,
    probes: { readiness: '/healthz', liveness: '/healthz', listener: 'main' },
  },
  sim: {
    schema: SimConfig,
    envPrefix: SIM_ENV_PREFIX,
    probes: { readiness: '/health', liveness: '/health', listener: 'main' },
  },
};

const SCHEMAS: Record<string, new (data: any) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/PersistentVolumeClaim': PersistentVolumeClaim,
  'v1/Pod': Pod,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'batch/v1/Job': Job,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  // The prometheus-operator component's kinds (the operator's CRDs).
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
  'monitoring.coreos.com/v1/PodMonitor': PodMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
  'v1/ServiceAccount': ServiceAccount,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
};

const CLUSTER_SCOPED = new Set(['Namespace']);
const WORKLOAD_KINDS = new Set(['Deployment', 'StatefulSet', 'Job', 'Pod']);

export interface CheckOptions {
  /** Values of Secrets the manifests reference but do not contain, by `name/key` (created by hand in a cluster). */
  readonly secrets?: Readonly<Record<string, string>>;
}

/** One kvroute container as the checks saw it: its app, resolved env and loaded configuration. */
export interface KvrouteContainer {
  readonly workload: K8sObject;
  readonly container: any;
  readonly command: string;
  readonly env: ReadonlyMap<string, string | undefined>;
  /** The app's configuration as main.ts would load it (router, poller, sim), when it loads. */
  readonly config?: Record<string, any>;
  /** Bench flags, parsed (bench only). */
  readonly benchArgs?: Record<string, string | boolean | undefined>;
}

/** Every problem found, one line each (`Kind/name container: what`). */
export function checkManifests(objects: readonly K8sObject[], options: CheckOptions = {}): string[] {
  return inspectManifests(objects, options).problems;
}

/** The problems and the kvroute containers of `objects` (tests assert on the loaded configs too). */
export function inspectManifests(
  objects: readonly K8sObject[],
  options: CheckOptions = {},
): { problems: string[]; containers: KvrouteContainer[] } {
  const index = new ObjectIndex(objects);
  const problems: string[] = [];
  for (const object of objects) problems.push(...checkSchema(object), ...checkNamespace(object, index));
  for (const object of objects) {
    if (object.kind === 'Service') problems.push(...checkService(object, index));
    if (object.kind === 'StatefulSet') problems.push(...checkStatefulSet(object, index));
    if (object.kind === 'PodDisruptionBudget' || object.kind === 'NetworkPolicy')
      problems.push(...checkSelectsPods(object, index));
    if (object.kind === 'HorizontalPodAutoscaler') problems.push(...checkAutoscaler(object, index));
    if (object.kind === 'ConfigMap') problems.push(...checkSharedConfigFiles(object));
  }
  const containers: KvrouteContainer[] = [];
  for (const workload of objects.filter((object) => WORKLOAD_KINDS.has(object.kind))) {
    problems.push(...checkWorkload(workload, index, options));
    for (const pod of podSpecsOf(workload)) {
      for (const container of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
        const where = `${workload.kind}/${workload.metadata.name} ${container.name}`;
        const env = resolveEnv(container, workload, index, options, problems, where);
        problems.push(...checkContainer(container, where));
        if (imageRepository(container.image) !== KVROUTE_IMAGE) continue;
        const inspected = checkKvrouteContainer({ workload, pod, container, env, index, where, problems });
        if (inspected !== undefined) containers.push(inspected);
      }
    }
  }
  problems.push(...checkBenchMatchesRouters(containers));
  return { problems, containers };
}

class ObjectIndex {
  constructor(readonly objects: readonly K8sObject[]) {}

  find(kind: string, name: string, namespace: string | undefined): K8sObject | undefined {
    return this.objects.find(
      (object) => object.kind === kind && object.metadata.name === name && object.metadata.namespace === namespace,
    );
  }

  namespaces(): Set<string> {
    return new Set(this.objects.filter((object) => object.kind === 'Namespace').map((object) => object.metadata.name));
  }

  /** Workloads whose pod template carries every label of `selector`. */
  workloadsSelectedBy(selector: Record<string, string> | undefined, namespace: string | undefined): K8sObject[] {
    if (selector === undefined || Object.keys(selector).length === 0) return [];
    return this.objects.filter(
      (object) =>
        WORKLOAD_KINDS.has(object.kind) &&
        object.metadata.namespace === namespace &&
        matchesLabels(podLabelsOf(object), selector),
    );
  }
}

function checkSchema(object: K8sObject): string[] {
  const Model = SCHEMAS[`${object.apiVersion}/${object.kind}`];
  if (Model === undefined)
    return [`${object.kind}/${object.metadata.name}: no schema here for ${object.apiVersion} ${object.kind}`];
  try {
    new Model(structuredClone(object)).validate();
    return [];
  } catch (error) {
    return [
      `${object.kind}/${object.metadata.name}: schema: ${error instanceof Error ? error.message : String(error)}`,
    ];
  }
}

function checkNamespace(object: K8sObject, index: ObjectIndex): string[] {
  const namespaces = index.namespaces();
  if (CLUSTER_SCOPED.has(object.kind) || namespaces.size === 0) return [];
  const namespace = object.metadata.namespace;
  return namespace !== undefined && namespaces.has(namespace)
    ? []
    : [
        `${object.kind}/${object.metadata.name}: namespace ${String(namespace)} is not one of the manifests' Namespaces`,
      ];
}

function checkService(service: K8sObject, index: ObjectIndex): string[] {
  const where = `Service/${service.metadata.name}`;
  const workloads = index.workloadsSelectedBy(service['spec']?.selector, service.metadata.namespace);
  if (workloads.length === 0) return [`${where}: its selector matches no pod template`];
  const problems: string[] = [];
  for (const port of service['spec']?.ports ?? []) {
    const target = port.targetPort ?? port.port;
    for (const workload of workloads) {
      const found = podSpecsOf(workload).some((pod) =>
        (pod.containers ?? []).some((container: any) =>
          (container.ports ?? []).some((p: any) => p.name === target || p.containerPort === target),
        ),
      );
      if (!found)
        problems.push(
          `${where}: targetPort ${String(target)} is no container port of ${workload.kind}/${workload.metadata.name}`,
        );
    }
  }
  return problems;
}

function checkStatefulSet(statefulSet: K8sObject, index: ObjectIndex): string[] {
  const where = `StatefulSet/${statefulSet.metadata.name}`;
  const serviceName = statefulSet['spec']?.serviceName;
  const service =
    typeof serviceName === 'string' ? index.find('Service', serviceName, statefulSet.metadata.namespace) : undefined;
  if (service === undefined)
    return [
      `${where}: serviceName ${String(serviceName)} is no Service (pods get DNS names only through a headless Service)`,
    ];
  const problems: string[] = [];
  if (service['spec']?.clusterIP !== 'None')
    problems.push(`${where}: Service ${serviceName} is not headless (clusterIP: None)`);
  if (!matchesLabels(podLabelsOf(statefulSet), service['spec']?.selector ?? {}))
    problems.push(`${where}: Service ${serviceName} does not select its pods`);
  return problems;
}

function checkSelectsPods(object: K8sObject, index: ObjectIndex): string[] {
  const selector =
    object.kind === 'NetworkPolicy' ? object['spec']?.podSelector?.matchLabels : object['spec']?.selector?.matchLabels;
  return index.workloadsSelectedBy(selector, object.metadata.namespace).length > 0
    ? []
    : [`${object.kind}/${object.metadata.name}: its selector matches no pod template`];
}

function checkAutoscaler(hpa: K8sObject, index: ObjectIndex): string[] {
  const where = `HorizontalPodAutoscaler/${hpa.metadata.name}`;
  const ref = hpa['spec']?.scaleTargetRef ?? {};
  const target = index.find(ref.kind, ref.name, hpa.metadata.namespace);
  if (target === undefined) return [`${where}: scaleTargetRef ${ref.kind}/${ref.name} does not exist`];
  const problems: string[] = [];
  const scalesOnCpu = (hpa['spec']?.metrics ?? []).some(
    (metric: any) =>
      metric.type === 'Resource' && metric.resource?.name === 'cpu' && metric.resource?.target?.type === 'Utilization',
  );
  if (scalesOnCpu) {
    for (const container of podSpecsOf(target).flatMap((pod) => pod.containers ?? [])) {
      if (container.resources?.requests?.cpu === undefined)
        problems.push(
          `${where}: CPU utilization needs a CPU request on ${target.kind}/${target.metadata.name} ${container.name}`,
        );
    }
  }
  const minReplicas = hpa['spec']?.minReplicas ?? 1;
  const replicas = target['spec']?.replicas ?? 1;
  if (replicas < minReplicas)
    problems.push(
      `${where}: ${target.kind}/${target.metadata.name} has ${replicas} replicas, below minReplicas ${minReplicas}`,
    );
  return problems;
}

/** kvroute.yaml in a ConfigMap: top-level keys belong to the router or the poller, sections to their app. */
function checkSharedConfigFiles(configMap: K8sObject): string[] {
  const problems: string[] = [];
  for (const [key, text] of Object.entries((configMap['data'] ?? {}) as Record<string, string>)) {
    if (!/kvroute\.ya?ml$/.test(key)) continue;
    const where = `ConfigMap/${configMap.metadata.name} ${key}`;
    let values: unknown;
    try {
      values = parseYaml(text);
    } catch (error) {
      problems.push(`${where}: not YAML: ${error instanceof Error ? error.message : String(error)}`);
      continue;
    }
    if (typeof values !== 'object' || values === null || Array.isArray(values)) {
      problems.push(`${where}: not a mapping`);
      continue;
    }
    const { router, poller, ...common } = values as Record<string, unknown>;
    const neither = unknownConfigKeys('router', Object.keys(common)).filter(
      (name) => unknownConfigKeys('poller', [name]).length > 0,
    );
    if (neither.length > 0)
      problems.push(`${where}: top-level keys neither the router nor the poller has: ${neither.join(', ')}`);
    for (const [app, section] of [
      ['router', router],
      ['poller', poller],
    ] as const) {
      if (section === undefined) continue;
      if (typeof section !== 'object' || section === null || Array.isArray(section)) {
        problems.push(`${where}: ${app}: must be a mapping`);
        continue;
      }
      const unknown = unknownConfigKeys(app, Object.keys(section));
      if (unknown.length > 0) problems.push(`${where}: ${app}: keys the ${app} does not have: ${unknown.join(', ')}`);
    }
  }
  return problems;
}

function checkWorkload(workload: K8sObject, index: ObjectIndex, options: CheckOptions): string[] {
  const where = `${workload.kind}/${workload.metadata.name}`;
  const problems: string[] = [];
  const selector = workload['spec']?.selector?.matchLabels;
  if (workload.kind !== 'Pod' && selector !== undefined && !matchesLabels(podLabelsOf(workload), selector))
    problems.push(`${where}: selector does not match the pod template's labels`);
  const claimTemplates = new Set<string>(
    (workload['spec']?.volumeClaimTemplates ?? []).map((template: any) => template.metadata?.name),
  );
  for (const pod of podSpecsOf(workload)) {
    for (const volume of pod.volumes ?? []) {
      if (
        volume.configMap &&
        !volume.configMap.optional &&
        index.find('ConfigMap', volume.configMap.name, workload.metadata.namespace) === undefined
      ) {
        problems.push(`${where}: volume ${volume.name}: ConfigMap ${volume.configMap.name} does not exist`);
      }
      // A Secret volume (created by hand, as kvroute-api-keys): each key it mounts must be in the
      // manifests or given, or the pod waits in ContainerCreating.
      if (volume.secret && !volume.secret.optional) {
        const inManifests = index.find('Secret', volume.secret.secretName, workload.metadata.namespace);
        const keys = (volume.secret.items ?? []).map((item: { key: string }) => item.key);
        if (keys.length === 0 && inManifests === undefined)
          problems.push(
            `${where}: volume ${volume.name}: Secret ${volume.secret.secretName} is neither in the manifests nor given`,
          );
        for (const key of keys)
          if (
            inManifests?.['stringData']?.[key] === undefined &&
            inManifests?.['data']?.[key] === undefined &&
            options.secrets?.[`${volume.secret.secretName}/${key}`] === undefined
          )
            problems.push(
              `${where}: volume ${volume.name}: Secret ${volume.secret.secretName} (key ${key}) is neither in the manifests nor given`,
            );
      }
      if (
        volume.persistentVolumeClaim &&
        index.find('PersistentVolumeClaim', volume.persistentVolumeClaim.claimName, workload.metadata.namespace) ===
          undefined
      ) {
        problems.push(
          `${where}: volume ${volume.name}: PersistentVolumeClaim ${volume.persistentVolumeClaim.claimName} does not exist`,
        );
      }
    }
    const volumeNames = new Set<string>([...(pod.volumes ?? []).map((volume: any) => volume.name), ...claimTemplates]);
    for (const container of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
      for (const mount of container.volumeMounts ?? []) {
        if (!volumeNames.has(mount.name))
          problems.push(`${where} ${container.name}: volumeMount ${mount.name} has no volume`);
      }
    }
  }
  return problems;
}

/**
 * The router's operations listener (/metrics, /readyz, /healthz): `opsHost`/`opsPort` of its config,
 * defaulting to the API's host and to the router's default port when they are not set.
 */
function opsListener(config: Record<string, any>): { host: unknown; port: unknown } {
  return { host: config['opsHost'] ?? config['host'], port: config['opsPort'] ?? ROUTER_OPS_PORT_DEFAULT };
}

/** Generic container checks: probe ports, `$(VAR)` references. */
function checkContainer(container: any, where: string): string[] {
  const problems: string[] = [];
  const ports = (container.ports ?? []) as { name?: string; containerPort: number }[];
  for (const probeName of ['readinessProbe', 'livenessProbe', 'startupProbe']) {
    const probe = container[probeName];
    const port = probe?.httpGet?.port ?? probe?.tcpSocket?.port;
    if (port === undefined) continue;
    if (!ports.some((p) => p.name === port || p.containerPort === port))
      problems.push(`${where}: ${probeName} port ${String(port)} is no container port`);
  }
  const envNames = new Set((container.env ?? []).map((env: any) => env.name));
  for (const word of [...(container.command ?? []), ...(container.args ?? [])] as string[]) {
    for (const match of String(word).matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
      if (!envNames.has(match[1]))
        problems.push(
          `${where}: $(${match[1]}) in its arguments is not one of its env vars (Kubernetes would pass it literally)`,
        );
    }
  }
  return problems;
}

/** The container's env as the kubelet would set it (values of ConfigMap keys and given Secrets). */
function resolveEnv(
  container: any,
  workload: K8sObject,
  index: ObjectIndex,
  options: CheckOptions,
  problems: string[],
  where: string,
): Map<string, string | undefined> {
  const env = new Map<string, string | undefined>();
  const namespace = workload.metadata.namespace;
  for (const entry of container.env ?? []) {
    if (env.has(entry.name)) problems.push(`${where}: env ${entry.name} is set twice`);
    if (entry.value !== undefined) {
      // The kubelet expands $(NAME) of variables defined earlier in the list and leaves others as written.
      env.set(
        entry.name,
        String(entry.value).replace(
          /\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g,
          (written, name: string) => env.get(name) ?? written,
        ),
      );
      continue;
    }
    const configMapRef = entry.valueFrom?.configMapKeyRef;
    const secretRef = entry.valueFrom?.secretKeyRef;
    if (configMapRef) {
      const configMap = index.find('ConfigMap', configMapRef.name, namespace);
      const value = configMap?.['data']?.[configMapRef.key] as string | undefined;
      if (value === undefined && !configMapRef.optional)
        problems.push(`${where}: env ${entry.name}: ConfigMap ${configMapRef.name} has no key ${configMapRef.key}`);
      env.set(entry.name, value);
    } else if (secretRef) {
      const inManifests = index.find('Secret', secretRef.name, namespace)?.['stringData']?.[secretRef.key] as
        | string
        | undefined;
      const value = inManifests ?? options.secrets?.[`${secretRef.name}/${secretRef.key}`];
      if (value === undefined && !secretRef.optional)
        problems.push(
          `${where}: env ${entry.name}: Secret ${secretRef.name} (key ${secretRef.key}) is neither in the manifests nor given`,
        );
      env.set(entry.name, value);
    } else if (entry.valueFrom?.fieldRef || entry.valueFrom?.resourceFieldRef) {
      env.set(entry.name, undefined);
    } else {
      problems.push(`${where}: env ${entry.name} has neither value nor valueFrom`);
    }
  }
  for (const source of container.envFrom ?? [])
    problems.push(`${where}: envFrom (${JSON.stringify(source)}) hides which variables are set: list them under env`);
  return env;
}

interface KvrouteContext {
  workload: K8sObject;
  pod: any;
  container: any;
  env: Map<string, string | undefined>;
  index: ObjectIndex;
  where: string;
  problems: string[];
}

function checkKvrouteContainer(context: KvrouteContext): KvrouteContainer | undefined {
  const { container, where, problems, pod, env, workload } = context;
  if (container.command !== undefined)
    problems.push(`${where}: sets command; the image's entrypoint picks the app from the first arg`);
  const command: unknown = container.args?.[0];
  if (!isKvrouteCommand(command)) {
    problems.push(`${where}: first arg ${JSON.stringify(command)} is not one of ${KVROUTE_COMMANDS.join(', ')}`);
    return undefined;
  }
  problems.push(...checkHardening(container, pod, where));
  if (command === 'bench') return checkBench(context);

  const app: KvrouteApp = command;
  const unknown = unknownEnvVars(app, env.keys());
  if (unknown.length > 0) problems.push(`${where}: env vars the ${app} does not read: ${unknown.join(', ')}`);
  const config = loadAppConfig(app, context);
  if (config === undefined) return { workload, container, command, env };

  const ports = (container.ports ?? []) as { name?: string; containerPort: number }[];
  const listening = ports.find((port) => port.containerPort === config['port']);
  if (listening === undefined)
    problems.push(`${where}: the ${app} listens on ${config['port']}, which is no container port`);
  if (/^(127\.|localhost$|::1$)/.test(String(config['host'])))
    problems.push(
      `${where}: the ${app} listens on ${config['host']}, unreachable from outside the pod (set its host to 0.0.0.0)`,
    );
  const probes = APP_CONFIG[app].probes;
  const probed = probes.listener === 'ops' ? opsListener(config) : { host: config['host'], port: config['port'] };
  const probedPort = ports.find((port) => port.containerPort === probed.port);
  if (probes.listener === 'ops') {
    if (probedPort === undefined)
      problems.push(
        `${where}: the ${app}'s ops listener (metrics, readiness) is on ${probed.port}, which is no container port`,
      );
    else if (probedPort.name !== 'ops')
      problems.push(`${where}: the ${app}'s ops port ${probed.port} is named ${String(probedPort.name)}, not ops`);
    if (/^(127\.|localhost$|::1$)/.test(String(probed.host)))
      problems.push(
        `${where}: the ${app}'s ops listener is on ${probed.host}: the kubelet and Prometheus cannot reach it`,
      );
  }
  for (const [probeName, path] of [
    ['readinessProbe', probes.readiness],
    ['livenessProbe', probes.liveness],
  ] as const) {
    const probe = container[probeName]?.httpGet;
    if (probe === undefined) problems.push(`${where}: no HTTP ${probeName} (the ${app} serves ${path})`);
    else if (probe.path !== path) problems.push(`${where}: ${probeName} asks ${probe.path}, the ${app} serves ${path}`);
    else if (probe.port !== probed.port && probe.port !== probedPort?.name)
      problems.push(
        `${where}: ${probeName} port ${probe.port} is not the ${app}'s ${probes.listener === 'ops' ? 'ops ' : ''}port ${probed.port}`,
      );
  }

  if (app === 'router' || app === 'poller') {
    if (typeof config['redisUrl'] === 'string')
      problems.push(...checkUrl(config['redisUrl'], context.index, workload.metadata.namespace, `${where}: redisUrl`));
    for (const backend of backendUrls(config['backends']))
      problems.push(...checkUrl(backend, context.index, workload.metadata.namespace, `${where}: backend`));
    const graceMs = (pod.terminationGracePeriodSeconds ?? 30) * 1000;
    const preStopMs = preStopSleepMs(container);
    // The router drains (readiness off, still serving) for shutdownDrainDelayMs, then gives in-flight requests shutdownGraceMs.
    const drainMs = app === 'router' ? ((config['shutdownDrainDelayMs'] as number | undefined) ?? 0) : 0;
    const needMs = (config['shutdownGraceMs'] as number) + drainMs + preStopMs;
    if (graceMs <= needMs)
      problems.push(
        `${where}: terminationGracePeriodSeconds ${graceMs / 1000} s does not outlast preStop (${preStopMs / 1000} ` +
          `s) + shutdownDrainDelayMs (${drainMs} ms) + shutdownGraceMs (${config['shutdownGraceMs']} ` +
          `ms): the kubelet would kill in-flight requests`,
      );
  }
  if (app === 'router' && preStopSleepMs(container) === 0)
    problems.push(
      `${where}: no preStop sleep: the load balancer may still send connections to a router that stopped accepting them`,
    );
  return { workload, container, command, env, config };
}

/** Loads the app's configuration as main.ts would: the mounted config file, env, flags (args after the app). */
function loadAppConfig(app: KvrouteApp, context: KvrouteContext): Record<string, any> | undefined {
  const { container, env, where, problems } = context;
  const settings = APP_CONFIG[app];
  const argv = (container.args ?? []).slice(1).map(String);
  const fileEnv = `${settings.envPrefix}CONFIG`;
  const flagAt = argv.indexOf('--config');
  const filePath = flagAt >= 0 ? argv[flagAt + 1] : env.get(fileEnv);
  const tempDir = mkdtempSync(join(tmpdir(), 'kvroute-k8s-'));
  try {
    const envForLoad: Record<string, string | undefined> = Object.fromEntries(env);
    const argvForLoad = [...argv];
    if (filePath !== undefined && filePath !== '') {
      const text = mountedFile(filePath, context);
      if (text === undefined) {
        problems.push(`${where}: config file ${filePath} is not on any mounted ConfigMap`);
        return undefined;
      }
      const localPath = join(tempDir, basename(filePath));
      writeFileSync(localPath, text);
      if (flagAt >= 0) argvForLoad[flagAt + 1] = localPath;
      else envForLoad[fileEnv] = localPath;
    }
    const loaded = loadConfig({
      schema: settings.schema,
      argv: argvForLoad,
      env: envForLoad,
      envPrefix: settings.envPrefix,
      sharedFile: settings.sharedFile,
    });
    if (loaded.kind !== 'config') {
      problems.push(`${where}: its args ask for --help`);
      return undefined;
    }
    return loaded.config as Record<string, any>;
  } catch (error) {
    problems.push(
      `${where}: the ${app}'s configuration does not load: ${error instanceof Error ? error.message.replaceAll(tempDir, '<mounted>') : String(error)}`,
    );
    return undefined;
  } finally {
    rmSync(tempDir, { recursive: true, force: true });
  }
}

/** The content of `path` in the container, when it is a key of a ConfigMap mounted as a volume. */
function mountedFile(path: string, context: KvrouteContext): string | undefined {
  for (const mount of context.container.volumeMounts ?? []) {
    const relative = posix.relative(mount.mountPath, path);
    if (relative === '' || relative.startsWith('..')) continue;
    const volume = (context.pod.volumes ?? []).find((candidate: any) => candidate.name === mount.name);
    if (!volume?.configMap) continue;
    const configMap = context.index.find('ConfigMap', volume.configMap.name, context.workload.metadata.namespace);
    const item = (volume.configMap.items ?? []).find((candidate: any) => candidate.path === relative);
    const key = item?.key ?? relative;
    const text = configMap?.['data']?.[key] as string | undefined;
    if (text !== undefined) return text;
  }
  return undefined;
}

function checkBench(context: KvrouteContext): KvrouteContainer {
  const { container, env, where, problems, workload, index } = context;
  const foreign = [...env.keys()].filter((name) => name.startsWith('KVROUTE_') && !BENCH_ENV.has(name));
  if (foreign.length > 0) problems.push(`${where}: env vars the bench does not read: ${foreign.join(', ')}`);
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      args: (container.args ?? []).slice(1).map(String),
      options: BENCH_OPTIONS,
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (error) {
    problems.push(`${where}: bench args: ${error instanceof Error ? error.message : String(error)}`);
    return { workload, container, command: 'bench', env };
  }
  const scenario = values['scenario'];
  if (typeof scenario !== 'string') problems.push(`${where}: the bench needs --scenario`);
  else if (!existsSync(repoPath('bench', 'scenarios', `${scenario}.yaml`)))
    problems.push(`${where}: scenario ${scenario} is not in bench/scenarios/`);
  const namespace = workload.metadata.namespace;
  for (const entry of splitList(values['router'])) {
    const url = entry.replace(/^[a-z][a-z0-9-]*=/, '');
    problems.push(...checkUrl(url, index, namespace, `${where}: --router`));
  }
  for (const url of splitList(values['backends']))
    problems.push(...checkUrl(url, index, namespace, `${where}: --backends`));
  const out = values['out'];
  if (typeof out !== 'string') problems.push(`${where}: no --out: the report would stay in the container`);
  else {
    const mount = (container.volumeMounts ?? []).find(
      (candidate: any) => out === candidate.mountPath || out.startsWith(`${candidate.mountPath}/`),
    );
    const volume = (context.pod.volumes ?? []).find((candidate: any) => candidate.name === mount?.name);
    if (volume?.persistentVolumeClaim === undefined)
      problems.push(`${where}: --out ${out} is not on a PersistentVolumeClaim: the report would go with the pod`);
  }
  return { workload, container, command: 'bench', env, benchArgs: values };
}

/** The bench reads the backends' own counters: it must be given the backends the routers route to. */
function checkBenchMatchesRouters(containers: readonly KvrouteContainer[]): string[] {
  const routerBackends = containers
    .filter((entry) => entry.command === 'router' && entry.config !== undefined)
    .map((entry) => backendUrls(entry.config?.['backends']).sort().join(','));
  const problems: string[] = [];
  for (const bench of containers.filter((entry) => entry.command === 'bench' && entry.benchArgs !== undefined)) {
    const given = splitList(bench.benchArgs?.['backends']).sort().join(',');
    if (routerBackends.length > 0 && !routerBackends.includes(given))
      problems.push(
        `${bench.workload.kind}/${bench.workload.metadata.name} bench: --backends ${given} differ from the routers' backends ${routerBackends[0]}`,
      );
  }
  return problems;
}

/** Non-root, read-only root filesystem, no privilege escalation. */
function checkHardening(container: any, pod: any, where: string): string[] {
  const problems: string[] = [];
  const runAsNonRoot = container.securityContext?.runAsNonRoot ?? pod.securityContext?.runAsNonRoot;
  if (runAsNonRoot !== true) problems.push(`${where}: runAsNonRoot is not set`);
  if (container.securityContext?.readOnlyRootFilesystem !== true)
    problems.push(`${where}: root filesystem is writable`);
  if (container.securityContext?.allowPrivilegeEscalation !== false)
    problems.push(`${where}: allowPrivilegeEscalation is not false`);
  return problems;
}

/**
 * An in-cluster URL must reach something these manifests define: `svc` (or `svc.ns[.svc.cluster.local]`)
 * is a Service exposing the port; `pod.svc` (or `pod.svc.ns…`) is a pod of a StatefulSet behind headless
 * Service `svc`, with an ordinal below its replicas and a container port matching. A two-label host is
 * always read as `pod.svc`, so a typo there is caught (write an outside host by its full name); hosts of
 * three or more labels that do not end in one of the manifests' namespaces are outside the cluster.
 */
function checkUrl(text: string, index: ObjectIndex, namespace: string | undefined, where: string): string[] {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return [`${where} ${JSON.stringify(text)} is not a URL`];
  }
  const defaultPort: Record<string, number> = { 'http:': 80, 'https:': 443, 'redis:': 6379, 'rediss:': 6379 };
  const port = url.port === '' ? defaultPort[url.protocol] : Number(url.port);
  const namespaces = index.namespaces();
  const parts = url.hostname.replace(/\.svc(\.cluster\.local)?$/, '').split('.');
  if (parts.length > 1 && namespaces.has(parts[parts.length - 1] as string)) {
    if (parts[parts.length - 1] !== namespace)
      return [`${where} ${text} is in namespace ${parts[parts.length - 1]}, not ${namespace}`];
    parts.pop();
  } else if (url.hostname.endsWith('.svc') || url.hostname.endsWith('.svc.cluster.local')) {
    return [`${where} ${text}: namespace ${parts[parts.length - 1]} is not in the manifests`];
  }
  if (parts.length === 1) {
    const service = index.find('Service', parts[0] as string, namespace);
    if (service === undefined) return [`${where} ${text}: no Service ${parts[0]}`];
    if (!(service['spec']?.ports ?? []).some((p: any) => p.port === port))
      return [`${where} ${text}: Service ${parts[0]} has no port ${port}`];
    return [];
  }
  if (parts.length === 2) {
    const [podName, serviceName] = parts as [string, string];
    const service = index.find('Service', serviceName, namespace);
    if (service === undefined) return [`${where} ${text}: no Service ${serviceName} (for ${podName}.${serviceName})`];
    const statefulSet = index.objects.find(
      (object) =>
        object.kind === 'StatefulSet' &&
        object.metadata.namespace === namespace &&
        object['spec']?.serviceName === serviceName &&
        podName.startsWith(`${object.metadata.name}-`),
    );
    if (statefulSet === undefined)
      return [`${where} ${text}: ${podName} is no pod of a StatefulSet behind Service ${serviceName}`];
    const ordinal = Number(podName.slice(statefulSet.metadata.name.length + 1));
    const replicas = statefulSet['spec']?.replicas ?? 1;
    if (!Number.isInteger(ordinal) || ordinal < 0 || ordinal >= replicas)
      return [
        `${where} ${text}: StatefulSet ${statefulSet.metadata.name} has ${replicas} pods, ${podName} is not one of them`,
      ];
    const ports = podSpecsOf(statefulSet).flatMap((pod) =>
      (pod.containers ?? []).flatMap((container: any) => container.ports ?? []),
    );
    if (!ports.some((p: any) => p.containerPort === port))
      return [`${where} ${text}: the pods of StatefulSet ${statefulSet.metadata.name} listen on no port ${port}`];
    return [];
  }
  return [];
}

function preStopSleepMs(container: any): number {
  const preStop = container.lifecycle?.preStop;
  if (preStop?.sleep?.seconds !== undefined) return Number(preStop.sleep.seconds) * 1000;
  const command = preStop?.exec?.command as string[] | undefined;
  if (command?.[0] === 'sleep' && command[1] !== undefined) return Number(command[1]) * 1000;
  return 0;
}

/** Backend URLs of a router or poller config (URL strings or {url} objects). */
function backendUrls(backends: unknown): string[] {
  if (!Array.isArray(backends)) return [];
  return backends.map((backend) => (typeof backend === 'string' ? backend : String((backend as { url: unknown }).url)));
}

function splitList(value: string | boolean | undefined): string[] {
  return typeof value === 'string'
    ? value
        .split(',')
        .map((part) => part.trim())
        .filter(Boolean)
    : [];
}

function isKvrouteCommand(value: unknown): value is KvrouteCommand {
  return KVROUTE_COMMANDS.includes(value as KvrouteCommand);
}

function imageRepository(image: string | undefined): string {
  return (image ?? '').replace(/@.*$/, '').replace(/:[^/:]+$/, '');
}

function podLabelsOf(workload: K8sObject): Record<string, string> {
  return (workload.kind === 'Pod' ? workload.metadata.labels : workload['spec']?.template?.metadata?.labels) ?? {};
}

function matchesLabels(labels: Record<string, string>, selector: Record<string, string>): boolean {
  return Object.entries(selector).every(([key, value]) => labels[key] === value);
}
