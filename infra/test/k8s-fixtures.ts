/**
 * Test fixtures for the Kubernetes manifests: where they are, throwaway kustomizations on top of them,
 * and the real `kubectl kustomize` (k8s.system.test.ts checks our loader against it).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { parseYamlObjects, type K8sObject } from './k8s-kustomize';

export const K8S_DIR = join(import.meta.dirname, '..', 'k8s');

/**
 * A kustomization in a new temporary directory. `files` maps file names to contents; `{{k8s}}` in a
 * content is replaced by the relative path to infra/k8s (kustomize refuses absolute resource paths).
 */
export function writeKustomization(files: Readonly<Record<string, string>>): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-kustomization-'));
  const k8s = relative(dir, K8S_DIR);
  for (const [name, text] of Object.entries(files)) {
    const path = join(dir, name);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, text.replaceAll('{{k8s}}', k8s));
  }
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** `kubectl kustomize dir` (it needs no cluster), parsed. */
export function kubectlKustomize(dir: string): K8sObject[] {
  const result = spawnSync('kubectl', ['kustomize', dir], {
    encoding: 'utf8',
    timeout: 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (result.error)
    throw new Error(
      `kubectl kustomize ${dir} did not run (is kubectl installed? tools/ensure-system-tools.sh): ${result.error.message}`,
    );
  if (result.status !== 0) throw new Error(`kubectl kustomize ${dir} failed: ${result.stderr}`);
  return parseYamlObjects(result.stdout, `kubectl kustomize ${dir}`);
}

/** Objects in a stable order (kind, namespace, name), for comparing two builds. */
export function sortObjects(objects: readonly K8sObject[]): K8sObject[] {
  const key = (object: K8sObject): string =>
    `${object.kind}/${object.metadata.namespace ?? ''}/${object.metadata.name}`;
  return [...objects].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

/** The one object of `kind` named `name`; throws when it is missing. */
export function findObject(objects: readonly K8sObject[], kind: string, name: string): K8sObject {
  const found = objects.filter((object) => object.kind === kind && object.metadata.name === name);
  if (found.length !== 1)
    throw new Error(
      `expected one ${kind}/${name}, found ${found.length} among ${objects.map((object) => `${object.kind}/${object.metadata.name}`).join(', ')}`,
    );
  return found[0] as K8sObject;
}

/** The one object of `kind` whose name starts with `prefix` (generated ConfigMaps carry a hash suffix). */
export function findGenerated(objects: readonly K8sObject[], kind: string, prefix: string): K8sObject {
  const found = objects.filter(
    (object) => object.kind === kind && new RegExp(`^${prefix}-[a-z0-9]{10}$`).test(object.metadata.name),
  );
  if (found.length !== 1) throw new Error(`expected one generated ${kind} ${prefix}-<hash>, found ${found.length}`);
  return found[0] as K8sObject;
}

/** The local overlay with the managed-redis component, as a kustomization.yaml for writeKustomization. */
export const LOCAL_WITH_MANAGED_REDIS =
  'resources:\n  - {{k8s}}/overlays/local\ncomponents:\n  - {{k8s}}/components/managed-redis\n';
/** overlays/local with EndpointSlice discovery, pointed at its Service `vllm-sim`. */
export const LOCAL_WITH_DISCOVERY = [
  'resources:',
  '  - {{k8s}}/overlays/local',
  'components:',
  '  - {{k8s}}/components/endpointslice-discovery',
  'patches:',
  '  - patch: |-',
  '      apiVersion: apps/v1',
  '      kind: Deployment',
  '      metadata:',
  '        name: kvroute-router',
  '      spec:',
  '        template:',
  '          spec:',
  '            containers:',
  '              - name: router',
  '                env:',
  '                  - name: KVROUTE_DISCOVERY',
  '                    value: k8s://vllm-sim:http',
  '',
].join('\n');

const DEPLOYMENT = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 1
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
        - name: main
          image: example/main:1
          args: ["serve", "--fast"]
          env:
            - {name: A, value: "1"}
            - {name: B, value: "2"}
            - name: CONFIG
              valueFrom:
                configMapKeyRef: {name: settings, key: config}
          ports:
            - {name: http, containerPort: 80}
        - name: sidecar
          image: example/sidecar:1
      volumes:
        - name: settings
          configMap: {name: settings}
`;

/** Lines of a `patches:` entry: an inline strategic-merge patch of Deployment app, with `specLines` under its spec. */
function inlineAppPatch(...specLines: string[]): string[] {
  return [
    '  - patch: |-',
    '      apiVersion: apps/v1',
    '      kind: Deployment',
    '      metadata:',
    '        name: app',
    '      spec:',
    ...specLines.map((line) => `        ${line}`),
  ];
}

/**
 * Files for writeKustomization: `overlay/` on `base/` with a component, a merged configMapGenerator,
 * strategic-merge and JSON6902 patches, a namespace and labels (every feature our kustomize implements).
 */
export const FEATURE_OVERLAY: Readonly<Record<string, string>> = {
  'base/kustomization.yaml':
    'namespace: one\nresources:\n  - ns.yaml\n  - deployment.yaml\nconfigMapGenerator:\n  - name: settings\n    literals:\n      - config=a\n      - other=b\n',
  'base/ns.yaml': 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: placeholder\n',
  'base/deployment.yaml': DEPLOYMENT,
  'component/kustomization.yaml': [
    'apiVersion: kustomize.config.k8s.io/v1alpha1',
    'kind: Component',
    'patches:',
    ...inlineAppPatch(
      'template:',
      '  spec:',
      '    containers:',
      '      - name: main',
      '        env:',
      '          - {name: FROM_COMPONENT, value: "yes"}',
    ),
    '',
  ].join('\n'),
  'overlay/kustomization.yaml': [
    'namespace: two',
    'labels:',
    '  - pairs: {team: infra}',
    'resources:',
    '  - ../base',
    'components:',
    '  - ../component',
    'configMapGenerator:',
    '  - name: settings',
    '    behavior: merge',
    '    literals:',
    '      - config=b',
    'patches:',
    ...inlineAppPatch('replicas: 3'),
    '  - target: {kind: Deployment, name: app}',
    '    patch: |-',
    '      - op: replace',
    '        path: /spec/template/spec/containers/0/image',
    '        value: example/main:2',
    '',
  ].join('\n'),
};
