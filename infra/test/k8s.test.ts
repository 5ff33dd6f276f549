/**
 * infra/k8s: the kustomize base, the `local` and `a100` overlays and the managed-redis component,
 * built by the tests' loader (k8s.system.test.ts compares it with `kubectl kustomize`) and checked
 * object by object: the objects each deployment needs, and, through k8s-checks.ts, that every reference
 * resolves and every kvroute container's configuration loads as its app would load it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { unknownConfigKeys, unknownEnvVars } from './config-keys';
import { checkManifests, inspectManifests, KVROUTE_COMMANDS, KVROUTE_IMAGE } from './k8s-checks';
import {
  findGenerated,
  findObject,
  K8S_DIR,
  LOCAL_WITH_DISCOVERY,
  LOCAL_WITH_MANAGED_REDIS,
  writeKustomization,
} from './k8s-fixtures';
import { buildKustomization, podSpecsOf, type K8sObject } from './k8s-kustomize';

const build = (path: string): K8sObject[] => buildKustomization(join(K8S_DIR, path));
const podOf = (workload: K8sObject): any => podSpecsOf(workload)[0];
const containerOf = (workload: K8sObject, name: string): any => {
  const container = podOf(workload)?.containers?.find((candidate: any) => candidate.name === name);
  if (container === undefined) throw new Error(`${workload.kind}/${workload.metadata.name} has no container ${name}`);
  return container;
};
const kvrouteContainers = (objects: readonly K8sObject[]): { workload: K8sObject; container: any }[] =>
  objects.flatMap((workload) =>
    podSpecsOf(workload).flatMap((pod) =>
      [...(pod.initContainers ?? []), ...(pod.containers ?? [])]
        .filter((container: any) => String(container.image).startsWith(`${KVROUTE_IMAGE}:`))
        .map((container: any) => ({ workload, container })),
    ),
  );

const SIM_BACKENDS = [0, 1, 2, 3].map((i) => `http://vllm-sim-${i}.vllm-sim:8000`);
const VLLM_BACKENDS = [0, 1, 2, 3].map((i) => `http://vllm-${i}.vllm:8000`);
const MANAGED_REDIS_URL = 'rediss://:secret@redis.example.com:6380';
/** The in-cluster Redis's password Secret, created by hand before the first apply (infra/k8s/README.md). */
const REDIS_PASSWORD = '0123456789abcdef0123456789abcdef';
const WITH_REDIS_SECRET = { secrets: { 'kvroute-redis-auth/password': REDIS_PASSWORD } };

/** The shared platform every overlay keeps from the base. */
function expectPlatform(objects: readonly K8sObject[], backends: readonly string[]): void {
  expect(findObject(objects, 'Namespace', 'kvroute')).toBeDefined();
  for (const object of objects.filter((candidate) => candidate.kind !== 'Namespace'))
    expect(object.metadata.namespace, `${object.kind}/${object.metadata.name}`).toBe('kvroute');

  const redis = findObject(objects, 'Deployment', 'redis');
  const redisContainer = containerOf(redis, 'redis');
  expect(redisContainer.image).toMatch(/^redis:7/);
  expect(findObject(objects, 'Service', 'redis').spec.ports[0].port).toBe(6379);
  // A password, from the Secret, through a config file: never in redis-server's or redis-cli's arguments.
  const fromAuthSecret = { secretKeyRef: { name: 'kvroute-redis-auth', key: 'password' } };
  expect(redisContainer.env).toEqual([
    { name: 'REDIS_PASSWORD', valueFrom: fromAuthSecret },
    { name: 'REDISCLI_AUTH', valueFrom: fromAuthSecret },
  ]);
  const startCommand = redisContainer.command.join(' ');
  expect(startCommand).toMatch(
    /printf 'requirepass %s\\n' "\$REDIS_PASSWORD" > \/data\/auth\.conf && exec redis-server \/data\/auth\.conf /,
  );
  expect(startCommand).toContain('--maxmemory-policy noeviction');
  // Durable: admin-made API keys and the cache-salt secret live here, so an append-only file on a claim
  // outlives the pod, and the cap sits below the container's memory limit (room for the AOF rewrite).
  expect(startCommand).toContain('--appendonly yes --appendfsync everysec');
  expect(startCommand).not.toContain('--appendonly no');
  const maxmemoryMb = Number(/--maxmemory (\d+)gb/.exec(startCommand)?.[1]) * 1024;
  expect(maxmemoryMb).toBeGreaterThanOrEqual(2048);
  expect(Number(/^(\d+)Gi$/.exec(redisContainer.resources.limits.memory)?.[1]) * 1024).toBeGreaterThan(maxmemoryMb);
  const dataVolume = podOf(redis).volumes.find((volume: any) => volume.name === 'data');
  expect(dataVolume.persistentVolumeClaim.claimName).toBe('redis-data');
  expect(redisContainer.volumeMounts).toContainEqual({ name: 'data', mountPath: '/data' });
  expect(findObject(objects, 'PersistentVolumeClaim', 'redis-data').spec.accessModes).toEqual(['ReadWriteOnce']);
  expect(redis.spec.strategy.type).toBe('Recreate');
  // Its memory for the alert: an exporter beside it, with the password from env, its port only to Prometheus.
  const exporter = containerOf(redis, 'exporter');
  expect(exporter.env).toContainEqual({ name: 'REDIS_PASSWORD', valueFrom: fromAuthSecret });
  expect(exporter.args).toBeUndefined();
  expect(exporter.ports).toEqual([{ name: 'metrics', containerPort: 9121 }]);
  expect(redis.spec.template.metadata.labels['kvroute.io/scrape-job']).toBe('redis');
  expect(redisContainer.args).toBeUndefined();
  expect(redisContainer.readinessProbe.exec.command.join(' ')).toContain('grep -q PONG');
  // Only routers and pollers reach Redis; only they, the bench and Prometheus reach the backends.
  const redisPolicy = findObject(objects, 'NetworkPolicy', 'redis');
  expect(redisPolicy.spec.ingress).toEqual([
    {
      from: [
        {
          podSelector: {
            matchExpressions: [
              { key: 'app.kubernetes.io/name', operator: 'In', values: ['kvroute'] },
              { key: 'app.kubernetes.io/component', operator: 'In', values: ['router', 'poller'] },
            ],
          },
        },
      ],
      ports: [{ port: 6379 }],
    },
    {
      from: [
        {
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } },
          podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } },
        },
      ],
      ports: [{ port: 9121 }],
    },
  ]);
  const backendPolicy = findObject(objects, 'NetworkPolicy', 'backends');
  expect(backendPolicy.spec.podSelector).toEqual({ matchLabels: { 'app.kubernetes.io/component': 'backend' } });
  expect(backendPolicy.spec.policyTypes).toEqual(['Ingress']);
  expect(backendPolicy.spec.ingress[0].from[0].podSelector.matchExpressions[1].values).toEqual([
    'router',
    'poller',
    'bench',
  ]);
  // Prometheus only from one named namespace (a pod label alone can be set by anyone who can create pods).
  expect(backendPolicy.spec.ingress[1]).toEqual({
    from: [
      {
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } },
        podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } },
      },
    ],
    ports: [{ port: 8000 }],
  });
  for (const workload of objects.filter((object) => object.kind === 'StatefulSet')) {
    expect(
      podOf(workload).metadata?.labels ?? workload.spec.template.metadata.labels,
      workload.metadata.name,
    ).toMatchObject({ 'app.kubernetes.io/component': 'backend' });
  }

  const router = findObject(objects, 'Deployment', 'kvroute-router');
  expect(router.spec.replicas).toBe(3);
  const routerContainer = containerOf(router, 'router');
  expect(routerContainer.args).toEqual(['router']);
  // Probes and scrapes on the ops port; the API port serves neither /metrics nor the detailed /readyz.
  expect(routerContainer.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'ops' });
  expect(routerContainer.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'ops' });
  expect(routerContainer.ports).toContainEqual({ name: 'ops', containerPort: 9464 });
  expect(routerContainer.lifecycle.preStop.sleep.seconds).toBeGreaterThan(0);
  expect(podOf(router).terminationGracePeriodSeconds).toBeGreaterThan(
    30 + routerContainer.lifecycle.preStop.sleep.seconds,
  );
  expect(routerContainer.securityContext).toMatchObject({
    readOnlyRootFilesystem: true,
    allowPrivilegeEscalation: false,
  });
  expect(podOf(router).securityContext.runAsNonRoot).toBe(true);
  expect(routerContainer.resources.requests.cpu).toBeDefined();
  expect(router.spec.template.metadata.annotations).toMatchObject({
    'prometheus.io/scrape': 'true',
    'prometheus.io/port': '9464',
    'prometheus.io/path': '/metrics',
  });

  // Internal by default: the base runs in open mode (auth: none), so nothing outside the cluster reaches it.
  const service = findObject(objects, 'Service', 'kvroute-router');
  expect(service.spec).toMatchObject({ type: 'ClusterIP', sessionAffinity: 'None' });
  expect(service.spec.externalTrafficPolicy).toBeUndefined();
  expect(service.spec.ports).toEqual([{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' }]);
  expect(
    objects.filter(
      (object) => object.kind === 'Service' && ['LoadBalancer', 'NodePort'].includes(object['spec']?.type),
    ),
  ).toEqual([]);
  expect(routerContainer.ports).toContainEqual({ name: 'http', containerPort: 8080 });

  const budget = findObject(objects, 'PodDisruptionBudget', 'kvroute-router');
  expect(budget.spec.maxUnavailable === 1 || budget.spec.minAvailable === 2).toBe(true);
  const autoscaler = findObject(objects, 'HorizontalPodAutoscaler', 'kvroute-router');
  expect(autoscaler.apiVersion).toBe('autoscaling/v2');
  expect(autoscaler.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: 'kvroute-router' });
  expect(autoscaler.spec.minReplicas).toBe(3);
  expect(autoscaler.spec.metrics[0].resource.name).toBe('cpu');

  const poller = findObject(objects, 'Deployment', 'kvroute-poller');
  expect(poller.spec.replicas).toBe(2);
  const pollerContainer = containerOf(poller, 'poller');
  expect(pollerContainer.args).toEqual(['poller']);
  expect(pollerContainer.readinessProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
  expect(pollerContainer.ports).toContainEqual({ name: 'http', containerPort: 9464 });

  // Routers and pollers load the same backends and Redis, with its password (the apps' own loader, in k8s-checks.ts).
  const { containers } = inspectManifests(objects, WITH_REDIS_SECRET);
  for (const command of ['router', 'poller']) {
    const loaded = containers.find((entry) => entry.command === command);
    expect(
      loaded?.config?.['backends'].map((backend: { url: string }) => backend.url),
      command,
    ).toEqual(backends);
    expect(loaded?.config?.['redisUrl'], command).toBe(`redis://:${REDIS_PASSWORD}@redis:6379`);
  }
  expect(containers.find((entry) => entry.command === 'router')?.config?.['policy']).toBe('cacheaware');
}

/** What the brief asks of every kvroute container, spelled out beside k8s-checks.ts's fuller checks. */
function expectKnownAppsAndEnv(objects: readonly K8sObject[]): void {
  const containers = kvrouteContainers(objects);
  expect(containers.length).toBeGreaterThan(0);
  for (const { workload, container } of containers) {
    const where = `${workload.kind}/${workload.metadata.name} ${container.name}`;
    const command = container.args?.[0];
    expect(KVROUTE_COMMANDS, where).toContain(command);
    expect(container.command, where).toBeUndefined();
    const names = (container.env ?? []).map((env: { name: string }) => env.name);
    if (command === 'router' || command === 'poller' || command === 'sim')
      expect(unknownEnvVars(command, names), where).toEqual([]);
    else
      expect(
        names.filter((name: string) => name.startsWith('KVROUTE_')),
        where,
      ).toEqual([]);
  }
}

/** kvroute.yaml: top-level keys of either app, `router:` router keys, `poller:` poller keys. */
function expectSharedConfigKeys(objects: readonly K8sObject[]): void {
  const config = findGenerated(objects, 'ConfigMap', 'kvroute-config');
  const { router, poller, ...common } = parseYaml(config['data']['kvroute.yaml']) as Record<
    string,
    Record<string, unknown>
  >;
  expect(
    Object.keys(common).filter(
      (key) => unknownConfigKeys('router', [key]).length > 0 && unknownConfigKeys('poller', [key]).length > 0,
    ),
  ).toEqual([]);
  expect(unknownConfigKeys('router', Object.keys(router ?? {}))).toEqual([]);
  expect(unknownConfigKeys('poller', Object.keys(poller ?? {}))).toEqual([]);
  for (const workload of [
    findObject(objects, 'Deployment', 'kvroute-router'),
    findObject(objects, 'Deployment', 'kvroute-poller'),
  ]) {
    expect(podOf(workload).volumes).toContainEqual({ name: 'config', configMap: { name: config.metadata.name } });
  }
}

describe('infra/k8s/base', () => {
  const objects = build('base');

  it('holds the shared platform but no backends: an overlay must supply them', () => {
    expect(
      objects.map((object) => `${object.kind}/${object.metadata.name.replace(/-[a-z0-9]{10}$/, '-<hash>')}`).sort(),
    ).toEqual(
      [
        'ConfigMap/kvroute-backends-<hash>',
        'ConfigMap/kvroute-config-<hash>',
        'Deployment/kvroute-poller',
        'Deployment/kvroute-router',
        'Deployment/redis',
        'HorizontalPodAutoscaler/kvroute-router',
        'Namespace/kvroute',
        'NetworkPolicy/backends',
        'NetworkPolicy/redis',
        'PodDisruptionBudget/kvroute-poller',
        'PersistentVolumeClaim/redis-data',
        'PodDisruptionBudget/kvroute-router',
        'Service/kvroute-router',
        'Service/redis',
      ].sort(),
    );
    expect(findGenerated(objects, 'ConfigMap', 'kvroute-backends')['data']).toEqual({ backends: '' });
    // The router's loader refuses to start without backends: the checks see it too.
    // The backends' NetworkPolicy waits for the overlay's backends.
    expect(checkManifests(objects, WITH_REDIS_SECRET)).toEqual([
      'NetworkPolicy/backends: its selector matches no pod template',
      expect.stringMatching(
        /^Deployment\/kvroute-router router: the router's configuration does not load: .*backends/s,
      ),
    ]);
  });
});

describe('infra/k8s/overlays/local', () => {
  const objects = build('overlays/local');

  it('passes every check (schemas, references, app configs) once the Redis password Secret exists', () => {
    expect(checkManifests(objects, WITH_REDIS_SECRET)).toEqual([]);
    expect(checkManifests(objects)).toEqual([
      expect.stringContaining(
        'Deployment/redis redis: env REDIS_PASSWORD: Secret kvroute-redis-auth (key password) is neither in the manifests nor given',
      ),
      expect.stringContaining('REDISCLI_AUTH'),
      expect.stringContaining('Deployment/redis exporter: env REDIS_PASSWORD'),
    ]);
  });

  it('runs Redis, 3 routers behind an internal Service with a PDB and a CPU autoscaler, and 2 health pollers', () => {
    expectPlatform(objects, SIM_BACKENDS);
  });

  it('runs 4 simulated vLLM backends with stable DNS names behind a headless Service', () => {
    const sims = findObject(objects, 'StatefulSet', 'vllm-sim');
    expect(sims.spec.replicas).toBe(4);
    expect(sims.spec.serviceName).toBe('vllm-sim');
    const sim = containerOf(sims, 'sim');
    expect(sim.args).toEqual(['sim']);
    expect(sim.readinessProbe.httpGet.path).toBe('/health');
    const service = findObject(objects, 'Service', 'vllm-sim');
    expect(service.spec.clusterIP).toBe('None');
    const { containers } = inspectManifests(objects);
    expect(containers.find((entry) => entry.command === 'sim')?.config).toMatchObject({
      host: '0.0.0.0',
      port: 8000,
      profile: 'a100-14b',
    });
  });

  it('gives routers and pollers small requests', () => {
    expect(containerOf(findObject(objects, 'Deployment', 'kvroute-router'), 'router').resources.requests).toEqual({
      cpu: '100m',
      memory: '128Mi',
    });
    expect(containerOf(findObject(objects, 'Deployment', 'kvroute-poller'), 'poller').resources.requests).toEqual({
      cpu: '50m',
      memory: '96Mi',
    });
  });

  it('runs only kvroute apps, each setting only env vars it reads, and a kvroute.yaml of known keys', () => {
    expectKnownAppsAndEnv(objects);
    expectSharedConfigKeys(objects);
  });
});

describe('infra/k8s/overlays/a100', () => {
  const objects = build('overlays/a100');

  it('passes every check (schemas, references, app configs) once the Redis password Secret exists', () => {
    expect(checkManifests(objects, WITH_REDIS_SECRET)).toEqual([]);
    expect(checkManifests(objects)).toEqual([
      expect.stringContaining(
        'Deployment/redis redis: env REDIS_PASSWORD: Secret kvroute-redis-auth (key password) is neither in the manifests nor given',
      ),
      expect.stringContaining('REDISCLI_AUTH'),
      expect.stringContaining('Deployment/redis exporter: env REDIS_PASSWORD'),
    ]);
  });

  it('keeps the platform, its routers and pollers pointed at the 4 vLLM pods', () => {
    expectPlatform(objects, VLLM_BACKENDS);
    expect(objects.some((object) => object.metadata.name === 'vllm-sim')).toBe(false);
  });

  it('runs 4 vLLM servers on A100s, one GPU each, with prefix caching and cached-token details', () => {
    const vllm = findObject(objects, 'StatefulSet', 'vllm');
    expect(vllm.spec.replicas).toBe(4);
    expect(vllm.spec.serviceName).toBe('vllm');
    expect(findObject(objects, 'Service', 'vllm').spec.clusterIP).toBe('None');
    const pod = podOf(vllm);
    expect(pod.nodeSelector).toEqual({ 'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB' });
    expect(pod.tolerations).toContainEqual({ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' });
    const container = containerOf(vllm, 'vllm');
    expect(container.image).toMatch(/^vllm\/vllm-openai:/);
    expect(container.resources.requests['nvidia.com/gpu']).toBe(1);
    expect(container.resources.limits['nvidia.com/gpu']).toBe(1);
    expect(container.args.slice(0, 7)).toEqual([
      '--model',
      '$(MODEL)',
      '--enable-prefix-caching',
      '--enable-prompt-tokens-details',
      '--port',
      '8000',
      '--max-num-seqs',
    ]);
    // No dev mode (its endpoints include /reset_prefix_cache): the bench starts runs cold with --salt-runs.
    expect(container.env.map((env: { name: string }) => env.name)).not.toContain('VLLM_SERVER_DEV_MODE');
    const model = container.env.find((env: { name: string }) => env.name === 'MODEL').valueFrom.configMapKeyRef;
    expect(findObject(objects, 'ConfigMap', model.name)['data'][model.key]).toBe('Qwen/Qwen2.5-14B-Instruct');
    expect(container.readinessProbe.httpGet.path).toBe('/health');
    expect(container.readinessProbe.initialDelaySeconds).toBeGreaterThanOrEqual(60);
    expect(container.volumeMounts).toContainEqual({ name: 'hf-cache', mountPath: '/root/.cache/huggingface' });
    expect(vllm.spec.volumeClaimTemplates[0].metadata.name).toBe('hf-cache');
  });

  it('runs the seed-cloud bench in-cluster against the router Service and the vLLM pods, keeping its report on a PVC', () => {
    const job = findObject(objects, 'Job', 'kvroute-bench');
    const bench = containerOf(job, 'bench');
    // The runtime image ships the router, poller and sim bundles; the bench needs the Dockerfile's `bench` target.
    expect(bench.image).toBe(`${KVROUTE_IMAGE}:bench`);
    expect(bench.args).toEqual([
      'bench',
      '--scenario',
      'seed-cloud',
      '--router',
      'cacheaware=http://kvroute-router',
      '--backends',
      VLLM_BACKENDS.join(','),
      '--salt-runs',
      '--ignore-eos',
      '--out',
      '/results/seed-cloud',
    ]);
    expect(bench.volumeMounts).toContainEqual({ name: 'results', mountPath: '/results' });
    expect(podOf(job).volumes).toContainEqual({
      name: 'results',
      persistentVolumeClaim: { claimName: 'bench-results' },
    });
    expect(findObject(objects, 'PersistentVolumeClaim', 'bench-results').spec.resources.requests.storage).toBeDefined();
    expect(podOf(job).restartPolicy).toBe('Never');
  });

  it('runs only kvroute apps, each setting only env vars it reads, and a kvroute.yaml of known keys', () => {
    expectKnownAppsAndEnv(objects);
    expectSharedConfigKeys(objects);
  });

  it('ships a reader pod for the bench results that mounts the same claim', () => {
    const pod = parseYaml(readFileSync(join(K8S_DIR, 'overlays/a100/bench-results-reader.yaml'), 'utf8')) as K8sObject;
    expect(checkManifests([...objects, pod], WITH_REDIS_SECRET)).toEqual([]);
    expect(pod.spec.volumes[0].persistentVolumeClaim.claimName).toBe('bench-results');
  });
});

const PREFILL_BACKENDS = [0, 1].map((i) => `http://vllm-prefill-${i}.vllm-prefill:8000`);
const DECODE_BACKENDS = [0, 1].map((i) => `http://vllm-decode-${i}.vllm-decode:8000`);

describe('infra/k8s/overlays/pd-vllm', () => {
  const objects = build('overlays/pd-vllm');

  it('passes every check (schemas, references, app configs) once the Redis password Secret exists', () => {
    expect(checkManifests(objects, WITH_REDIS_SECRET)).toEqual([]);
  });

  it('gives the routers the engines by role and the NIXL protocol; the pollers watch all four', () => {
    const { containers } = inspectManifests(objects, WITH_REDIS_SECRET);
    const router = containers.find((entry) => entry.command === 'router')?.config;
    expect(router?.['backends']).toEqual([]);
    expect(router?.['prefillBackends']).toEqual(PREFILL_BACKENDS);
    expect(router?.['decodeBackends']).toEqual(DECODE_BACKENDS);
    expect(router?.['pdProtocol']).toBe('vllm-nixl');
    expect(router?.['pdMinUncachedTokens']).toBe(512);
    const poller = containers.find((entry) => entry.command === 'poller')?.config;
    expect((poller?.['backends'] as { url: string }[]).map((backend) => backend.url).sort()).toEqual(
      [...DECODE_BACKENDS, ...PREFILL_BACKENDS].sort(),
    );
  });

  it.each(['prefill', 'decode'])(
    'runs 2 vLLM %s engines on GPUs with the NixlConnector and its side channel',
    (role) => {
      const engines = findObject(objects, 'StatefulSet', `vllm-${role}`);
      expect(engines.spec.replicas).toBe(2);
      expect(engines.spec.template.metadata.labels).toMatchObject({
        'llm-d.ai/role': role,
        'kvroute.io/kv-transfer': 'nixl',
      });
      // Kubernetes copies a Service's labels onto its EndpointSlices: the role EndpointSlice discovery reads.
      expect(findObject(objects, 'Service', `vllm-${role}`).metadata.labels?.['llm-d.ai/role']).toBe(role);
      const container = containerOf(engines, 'vllm');
      expect(container.image).toMatch(/^vllm\/vllm-openai:/);
      expect(container.resources.limits['nvidia.com/gpu']).toBe(1);
      const config = container.args[container.args.indexOf('--kv-transfer-config') + 1];
      expect(JSON.parse(config)).toEqual({ kv_connector: 'NixlConnector', kv_role: 'kv_both' });
      expect(container.args).toContain('--enable-prefix-caching');
      const env = new Map(container.env.map((entry: any) => [entry.name, entry]));
      expect(env.get('VLLM_NIXL_SIDE_CHANNEL_HOST')).toEqual({
        name: 'VLLM_NIXL_SIDE_CHANNEL_HOST',
        valueFrom: { fieldRef: { fieldPath: 'status.podIP' } },
      });
      expect(env.get('VLLM_NIXL_SIDE_CHANNEL_PORT')).toEqual({ name: 'VLLM_NIXL_SIDE_CHANNEL_PORT', value: '5600' });
      expect(container.ports).toContainEqual({ name: 'nixl', containerPort: 5600 });
    },
  );

  it('lets the engines reach each other (side channel, UCX) past the base policy', () => {
    const policy = findObject(objects, 'NetworkPolicy', 'kv-transfer');
    expect(policy.spec.podSelector).toEqual({ matchLabels: { 'kvroute.io/kv-transfer': 'nixl' } });
    expect(policy.spec.ingress).toEqual([
      { from: [{ podSelector: { matchLabels: { 'kvroute.io/kv-transfer': 'nixl' } } }] },
    ]);
  });

  it('runs only kvroute apps, each setting only env vars it reads, and a kvroute.yaml of known keys', () => {
    expectKnownAppsAndEnv(objects);
    expectSharedConfigKeys(objects);
  });
});

describe('infra/k8s/overlays/public (components/public-api)', () => {
  const objects = build('overlays/public');
  const secrets = {
    ...WITH_REDIS_SECRET.secrets,
    'kvroute-api-keys/keys.yaml': 'keys: []\n',
    'kvroute-cache-salt/secret': '0123456789abcdef0123456789abcdef',
  };

  it('passes every check once its three Secrets exist, and says which ones are missing otherwise', () => {
    expect(checkManifests(objects, { secrets })).toEqual([]);
    expect(checkManifests(objects, WITH_REDIS_SECRET)).toEqual([
      'Deployment/kvroute-router: volume api-keys: Secret kvroute-api-keys (key keys.yaml) is neither in the manifests nor given',
      'Deployment/kvroute-router: volume cache-salt: Secret kvroute-cache-salt (key secret) is neither in the manifests nor given',
    ]);
  });

  it('runs the routers with API keys and the cache-salt secret read from the mounted Secrets', () => {
    const router = inspectManifests(objects, { secrets }).containers.find((entry) => entry.command === 'router');
    expect(router?.config).toMatchObject({ auth: 'api-keys' });
    const deployment = findObject(objects, 'Deployment', 'kvroute-router');
    const container = containerOf(deployment, 'router');
    const secretFileOf = (path: string): string | undefined => {
      const mount = container.volumeMounts.find((candidate: any) => path.startsWith(`${candidate.mountPath}/`));
      const volume = podOf(deployment).volumes.find((candidate: any) => candidate.name === mount?.name);
      const item = volume?.secret?.items?.find((candidate: any) => `${mount.mountPath}/${candidate.path}` === path);
      return item === undefined ? undefined : `${volume.secret.secretName}/${item.key}`;
    };
    expect(secretFileOf(router?.config?.['apiKeysFile'])).toBe('kvroute-api-keys/keys.yaml');
    expect(secretFileOf(router?.config?.['cacheSaltSecretFile'])).toBe('kvroute-cache-salt/secret');
  });

  it('exposes only the API port publicly, and keeps the internal Service', () => {
    const publicServices = objects.filter(
      (object) => object.kind === 'Service' && ['LoadBalancer', 'NodePort'].includes(object['spec']?.type),
    );
    expect(publicServices.map((service) => service.metadata.name)).toEqual(['kvroute-router-public']);
    const [service] = publicServices as [K8sObject];
    expect(service.metadata.namespace).toBe('kvroute');
    expect(service['spec']).toMatchObject({ externalTrafficPolicy: 'Local', sessionAffinity: 'None' });
    expect(service['spec'].ports).toEqual([{ name: 'https', port: 443, targetPort: 'http', protocol: 'TCP' }]);
    expect(findObject(objects, 'Service', 'kvroute-router').spec.type).toBe('ClusterIP');
  });
});

describe('infra/k8s/components/managed-redis', () => {
  const fixture = writeKustomization({ 'kustomization.yaml': LOCAL_WITH_MANAGED_REDIS });
  afterAll(() => fixture.remove());
  const objects = buildKustomization(fixture.dir);

  it('drops the in-cluster Redis and reads the URL from the kvroute-redis Secret', () => {
    expect(objects.filter((object) => object.metadata.name === 'redis')).toEqual([]);
    const fromSecret = { secretKeyRef: { name: 'kvroute-redis', key: 'url' } };
    expect(containerOf(findObject(objects, 'Deployment', 'kvroute-router'), 'router').env).toContainEqual({
      name: 'KVROUTE_REDIS_URL',
      valueFrom: fromSecret,
    });
    expect(containerOf(findObject(objects, 'Deployment', 'kvroute-poller'), 'poller').env).toContainEqual({
      name: 'KVROUTE_POLLER_REDIS_URL',
      valueFrom: fromSecret,
    });
  });

  it('passes every check once the Secret exists, and the apps load its URL over kvroute.yaml', () => {
    const { problems, containers } = inspectManifests(objects, { secrets: { 'kvroute-redis/url': MANAGED_REDIS_URL } });
    expect(problems).toEqual([]);
    expect(
      containers
        .filter((entry) => entry.command === 'router' || entry.command === 'poller')
        .map((entry) => entry.config?.['redisUrl']),
    ).toEqual([MANAGED_REDIS_URL, MANAGED_REDIS_URL]);
    expect(checkManifests(objects)).toEqual(
      expect.arrayContaining([
        expect.stringContaining('Secret kvroute-redis (key url) is neither in the manifests nor given'),
      ]),
    );
  });
});

describe('infra/k8s/components/endpointslice-discovery', () => {
  const fixture = writeKustomization({ 'kustomization.yaml': LOCAL_WITH_DISCOVERY });
  afterAll(() => fixture.remove());
  const objects = buildKustomization(fixture.dir);

  it('passes every check, and the router loads with discovery and no static backends', () => {
    const { problems, containers } = inspectManifests(objects, WITH_REDIS_SECRET);
    expect(problems).toEqual([]);
    const router = containers.find((entry) => entry.command === 'router');
    expect(router?.config?.['discovery']).toBe('k8s://vllm-sim:http');
    expect(router?.config?.['backends']).toEqual([]);
    // The pollers keep their static list.
    expect(containers.find((entry) => entry.command === 'poller')?.config?.['backends']).toHaveLength(4);
  });

  it("the router's service account may get, list and watch EndpointSlices, and nothing more; the named Service and port exist", () => {
    const pod = podOf(findObject(objects, 'Deployment', 'kvroute-router'));
    expect(pod.automountServiceAccountToken).toBe(true);
    expect(findObject(objects, 'ServiceAccount', pod.serviceAccountName)).toBeDefined();
    const binding = findObject(objects, 'RoleBinding', 'kvroute-router-endpointslices');
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: pod.serviceAccountName, namespace: 'kvroute' }]);
    const role = findObject(objects, 'Role', binding.roleRef.name);
    expect(binding.roleRef.kind).toBe('Role');
    expect(role.rules).toEqual([
      { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] },
    ]);
    // k8s://vllm-sim:http: the Service in the router's namespace, with a port of that name.
    const discovery = containerOf(findObject(objects, 'Deployment', 'kvroute-router'), 'router').env.find(
      (entry: any) => entry.name === 'KVROUTE_DISCOVERY',
    ).value as string;
    const [, service, portName] = /^k8s:\/\/([^/:]+):(.+)$/.exec(discovery) as RegExpExecArray;
    expect(findObject(objects, 'Service', service as string).spec.ports.map((port: any) => port.name)).toContain(
      portName,
    );
  });

  it('the other overlays keep the token unmounted', () => {
    expect(
      podOf(findObject(build('overlays/local'), 'Deployment', 'kvroute-router')).automountServiceAccountToken,
    ).toBe(false);
  });
});

describe('the checks catch broken manifests', () => {
  it('reports a broken overlay on disk: unknown env var, unknown app, loopback host, missing backend pod, unknown config keys', () => {
    const fixture = writeKustomization({
      'kustomization.yaml': [
        'resources:',
        '  - {{k8s}}/overlays/local',
        'configMapGenerator:',
        '  - name: kvroute-backends',
        '    behavior: merge',
        '    literals:',
        '      - backends=http://vllm-sim-0.vllm-sim:8000,http://vllm-sim-4.vllm-sim:8000',
        '  - name: kvroute-config',
        '    behavior: merge',
        '    files:',
        '      - kvroute.yaml=broken-kvroute.yaml',
        'patches:',
        '  - path: router-typo.yaml',
        '  - path: poller-app.yaml',
        '  - target: {kind: StatefulSet, name: vllm-sim}',
        '    patch: |-',
        '      - op: remove',
        '        path: /spec/template/spec/containers/0/env/0',
        '',
      ].join('\n'),
      'broken-kvroute.yaml': 'redisUrl: redis://redis:6379\nbogusKey: 1\nrouter:\n  polcy: cacheaware\n',
      'router-typo.yaml':
        'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: kvroute-router\nspec:\n  template:\n ' +
        '   spec:\n      containers:\n        - name: router\n          env:\n            - name: KVROUTE_POLICIES\n ' +
        '             value: cacheaware\n',
      'poller-app.yaml':
        'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: kvroute-poller\nspec:\n  template:\n ' +
        '   spec:\n      containers:\n        - name: poller\n          args: ["pollr"]\n',
    });
    try {
      const problems = checkManifests(buildKustomization(fixture.dir));
      const expected = [
        /kvroute-router router: env vars the router does not read: KVROUTE_POLICIES/,
        /kvroute-poller poller: first arg "pollr" is not one of router, poller, sim, bench/,
        /vllm-sim sim: the sim listens on 127\.0\.0\.1/,
        /kvroute-config-\w+ kvroute\.yaml: top-level keys neither the router nor the poller has: bogusKey/,
        /kvroute\.yaml: router: keys the router does not have: polcy/,
        /kvroute-router router: the router's configuration does not load: .*polcy/s,
      ];
      for (const pattern of expected)
        expect(problems, String(pattern)).toEqual(expect.arrayContaining([expect.stringMatching(pattern)]));
      // The router does not load (polcy), so its backends are not reached; the poller's are not either (pollr).
      // Fix those two and the missing sim pod shows:
      const routerOnly = writeKustomization({
        'kustomization.yaml':
          'resources:\n  - {{k8s}}/overlays/local\nconfigMapGenerator:\n  - name: kvroute-backends\n ' +
          '   behavior: merge\n    literals:\n      - backends=http://vllm-sim-4.vllm-sim:8000\n',
      });
      try {
        expect(checkManifests(buildKustomization(routerOnly.dir))).toEqual(
          expect.arrayContaining([
            expect.stringMatching(
              /kvroute-router router: backend http:\/\/vllm-sim-4\.vllm-sim:8000: StatefulSet vllm-sim has 4 pods, vllm-sim-4 is not one of them/,
            ),
          ]),
        );
      } finally {
        routerOnly.remove();
      }
    } finally {
      fixture.remove();
    }
  });

  it('reports broken objects: schema types, probes, grace period, selectors, bench flags and volumes', () => {
    const objects = structuredClone(build('overlays/a100'));
    const router = findObject(objects, 'Deployment', 'kvroute-router');
    podOf(router).terminationGracePeriodSeconds = 30;
    containerOf(router, 'router').readinessProbe.httpGet.path = '/healthz';
    findObject(objects, 'Deployment', 'kvroute-poller').spec.replicas = '2';
    findObject(objects, 'Service', 'vllm').spec.selector = { 'app.kubernetes.io/name': 'vlm' };
    const backends = findGenerated(objects, 'ConfigMap', 'kvroute-backends');
    backends['data'].backends = backends['data'].backends.replace('vllm-0.vllm', 'vllm-0.vlm');
    const bench = containerOf(findObject(objects, 'Job', 'kvroute-bench'), 'bench');
    bench.args = [
      'bench',
      '--scenario',
      'seed-clod',
      '--router',
      'cacheaware=http://kvroute-routr',
      '--backends',
      VLLM_BACKENDS.slice(0, 3).join(','),
      '--out',
      '/tmp/seed-cloud',
      '--reset-cash',
    ];
    const problems = checkManifests(objects);
    const expected = [
      new RegExp(
        String.raw`kvroute-router router: terminationGracePeriodSeconds 30 s does not outlast preStop \(10 s\) ` +
          String.raw`\+ shutdownDrainDelayMs \(5000 ms\) \+ shutdownGraceMs \(30000 ms\)`,
      ),
      /kvroute-router router: readinessProbe asks \/healthz, the router serves \/readyz/,
      /Deployment\/kvroute-poller: schema: .*replicas must be integer/,
      /Service\/vllm: its selector matches no pod template/,
      /kvroute-router router: backend http:\/\/vllm-0\.vlm:8000: no Service vlm/,
      /kvroute-poller poller: backend http:\/\/vllm-0\.vlm:8000: no Service vlm/,
      /StatefulSet\/vllm: Service vllm does not select its pods/,
      /kvroute-bench bench: bench args: .*--reset-cash/,
    ];
    for (const pattern of expected)
      expect(problems, String(pattern)).toEqual(expect.arrayContaining([expect.stringMatching(pattern)]));

    bench.args = bench.args.slice(0, -1); // known flags again: the bench's values are checked
    const benchProblems = checkManifests(objects).filter((problem) => problem.includes('kvroute-bench'));
    expect(benchProblems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/scenario seed-clod is not in bench\/scenarios\//),
        expect.stringMatching(/--router http:\/\/kvroute-routr: no Service kvroute-routr/),
        expect.stringMatching(/--out \/tmp\/seed-cloud is not on a PersistentVolumeClaim/),
        expect.stringMatching(/--backends .* differ from the routers' backends/),
      ]),
    );
  });

  it('reports a router probed on its API port, or without an ops port for its metrics and readiness', () => {
    const onApiPort = structuredClone(build('overlays/local'));
    containerOf(findObject(onApiPort, 'Deployment', 'kvroute-router'), 'router').livenessProbe.httpGet.port = 'http';
    expect(checkManifests(onApiPort, WITH_REDIS_SECRET)).toEqual([
      "Deployment/kvroute-router router: livenessProbe port http is not the router's ops port 9464",
    ]);
    const noOpsPort = structuredClone(build('overlays/local'));
    const router = containerOf(findObject(noOpsPort, 'Deployment', 'kvroute-router'), 'router');
    router.ports = router.ports.filter((port: { name: string }) => port.name !== 'ops');
    expect(checkManifests(noOpsPort, WITH_REDIS_SECRET)).toEqual(
      expect.arrayContaining([
        "Deployment/kvroute-router router: the router's ops listener (metrics, readiness) is on 9464, which is no container port",
        'Deployment/kvroute-router router: readinessProbe port ops is no container port',
      ]),
    );
  });

  it('refuses kustomizations it cannot build faithfully', () => {
    const missingTarget = writeKustomization({
      'kustomization.yaml': 'resources:\n  - {{k8s}}/overlays/local\npatches:\n  - path: p.yaml\n',
      'p.yaml': 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: kvroute-routr\nspec:\n  replicas: 5\n',
    });
    const unsupported = writeKustomization({
      'kustomization.yaml':
        'resources:\n  - {{k8s}}/overlays/local\nimages:\n  - name: ghcr.io/kvroute/kvroute\n    newTag: v1\n',
    });
    try {
      expect(() => buildKustomization(missingTarget.dir)).toThrow(
        /found 0 targets for the patch of Deployment kvroute-routr/,
      );
      expect(() => buildKustomization(unsupported.dir)).toThrow(/does not implement: images/);
    } finally {
      missingTarget.remove();
      unsupported.remove();
    }
  });
});
