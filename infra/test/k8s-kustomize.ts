/**
 * A small kustomize: builds infra/k8s's kustomizations the way `kubectl kustomize` (kustomize 5.5)
 * does, so the tests run where no kubectl is installed. It implements only what our manifests use and
 * throws on any other kustomization field, so a new feature in a manifest fails loudly here instead of
 * being skipped. k8s.system.test.ts checks with kubectl that both build the same objects.
 *
 * Supported:
 * - `resources` (YAML files, directories with a kustomization.yaml) and `components` (kind: Component);
 * - `configMapGenerator` (`literals`, `files` as `path` or `key=path`; `behavior` create, merge, replace),
 *   with kustomize's name suffix hash and the references to it rewritten in pod specs;
 * - `patches`: strategic-merge patches (maps merged, lists of containers, env, volumes, mounts, ports
 *   merged by their key, other lists replaced, `null` deletes, `$patch: delete` removes the object) and
 *   JSON6902 operation lists (`add`, `replace`, `remove`) with a `target`;
 * - `namespace` (which also renames Namespace objects, as kustomize does) and `labels` (metadata only).
 *
 * Order inside one kustomization, as kustomize: resources, components, generators, patches, namespace,
 * labels. Generated names get their hash suffix once, at the end of the top-level build.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { parseAllDocuments } from 'yaml';

/** A Kubernetes object as parsed from YAML (tests read it freely). */
export type K8sObject = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: any;
};

/** One object during a build: generated ConfigMaps get a hash suffix at the end. */
interface Resource {
  object: K8sObject;
  generated: boolean;
}

const KUSTOMIZATION_FILES = ['kustomization.yaml', 'kustomization.yml', 'Kustomization'];
const SUPPORTED_FIELDS = new Set([
  'apiVersion',
  'kind',
  'namespace',
  'labels',
  'resources',
  'components',
  'configMapGenerator',
  'patches',
]);
/** Kinds without a namespace (the ones a kvroute deployment could plausibly contain). */
const CLUSTER_SCOPED = new Set([
  'Namespace',
  'ClusterRole',
  'ClusterRoleBinding',
  'CustomResourceDefinition',
  'PersistentVolume',
  'StorageClass',
  'PriorityClass',
  'IngressClass',
]);

/** Builds the kustomization in `dir`, as `kubectl kustomize dir` prints it (object order aside). */
export function buildKustomization(dir: string): K8sObject[] {
  return finalizeNames(accumulate(resolve(dir), 'Kustomization', []));
}

/** Parses a multi-document YAML text into objects (empty documents dropped). */
export function parseYamlObjects(text: string, source: string): K8sObject[] {
  return parseAllDocuments(text).flatMap((document) => {
    if (document.errors.length > 0) throw new Error(`${source}: ${document.errors[0]?.message}`);
    const value = document.toJS() as unknown;
    if (value === null || value === undefined) return [];
    if (!isMap(value) || typeof value['kind'] !== 'string' || !isMap(value['metadata']))
      throw new Error(`${source}: a document is not a Kubernetes object`);
    return [value as K8sObject];
  });
}

/**
 * Builds one kustomization (or component) directory. A component works on what its parent has
 * accumulated so far (`inherited`) plus its own resources; a kustomization starts from nothing.
 */
function accumulate(
  dir: string,
  expectedKind: 'Kustomization' | 'Component',
  inherited: readonly Resource[],
): Resource[] {
  const file = KUSTOMIZATION_FILES.map((name) => join(dir, name)).find((path) => existsSync(path));
  if (file === undefined) throw new Error(`${dir}: no kustomization.yaml`);
  const kustomization = parseSingle(readFileSync(file, 'utf8'), file);
  const kind = (kustomization['kind'] as string | undefined) ?? 'Kustomization';
  if (kind !== expectedKind) throw new Error(`${file}: kind ${kind}, expected ${expectedKind}`);
  const unsupported = Object.keys(kustomization).filter((field) => !SUPPORTED_FIELDS.has(field));
  if (unsupported.length > 0)
    throw new Error(`${file}: fields this test's kustomize does not implement: ${unsupported.join(', ')}`);

  let result: Resource[] = [...inherited];
  for (const entry of asList<string>(kustomization['resources'], file, 'resources')) {
    const path = resolve(dir, entry);
    if (statSync(path).isDirectory()) result.push(...accumulate(path, 'Kustomization', []));
    else
      result.push(
        ...parseYamlObjects(readFileSync(path, 'utf8'), path).map((object) => ({ object, generated: false })),
      );
  }
  for (const entry of asList<string>(kustomization['components'], file, 'components')) {
    result = accumulate(resolve(dir, entry), 'Component', result);
  }
  result = runGenerators(result, kustomization, dir, file);
  result = runPatches(result, kustomization, dir, file);
  const namespace = kustomization['namespace'] as string | undefined;
  if (namespace !== undefined) for (const { object } of result) setNamespace(object, namespace);
  for (const entry of asList<Record<string, unknown>>(kustomization['labels'], file, 'labels'))
    addLabels(result, entry, file);
  return result;
}

function runGenerators(
  resources: Resource[],
  kustomization: Record<string, unknown>,
  dir: string,
  file: string,
): Resource[] {
  const result = [...resources];
  for (const generator of asList<Record<string, unknown>>(
    kustomization['configMapGenerator'],
    file,
    'configMapGenerator',
  )) {
    const unknown = Object.keys(generator).filter((key) => !['name', 'behavior', 'literals', 'files'].includes(key));
    if (unknown.length > 0)
      throw new Error(`${file}: configMapGenerator fields not implemented: ${unknown.join(', ')}`);
    const name = generator['name'];
    if (typeof name !== 'string') throw new Error(`${file}: configMapGenerator without a name`);
    const data: Record<string, string> = {};
    for (const literal of asList<string>(generator['literals'], file, 'literals')) {
      const at = literal.indexOf('=');
      if (at <= 0) throw new Error(`${file}: literal ${JSON.stringify(literal)} is not KEY=VALUE`);
      data[literal.slice(0, at)] = literal.slice(at + 1);
    }
    for (const entry of asList<string>(generator['files'], file, 'files')) {
      const at = entry.indexOf('=');
      const [key, path] = at > 0 ? [entry.slice(0, at), entry.slice(at + 1)] : [basename(entry), entry];
      data[key] = readFileSync(resolve(dir, path), 'utf8');
    }
    const behavior = (generator['behavior'] as string | undefined) ?? 'create';
    const existing = result.find(({ object }) => object.kind === 'ConfigMap' && object.metadata.name === name);
    if (behavior === 'create') {
      if (existing !== undefined)
        throw new Error(`${file}: ConfigMap ${name} exists already (use behavior: merge or replace)`);
      result.push({ object: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, data }, generated: true });
    } else if (behavior === 'merge' || behavior === 'replace') {
      if (existing === undefined)
        throw new Error(`${file}: configMapGenerator ${name} (behavior ${behavior}) found no ConfigMap to ${behavior}`);
      existing.object['data'] =
        behavior === 'merge' ? { ...(existing.object['data'] as Record<string, string>), ...data } : data;
    } else {
      throw new Error(`${file}: configMapGenerator behavior ${behavior} is not create, merge or replace`);
    }
  }
  return result;
}

function runPatches(
  resources: Resource[],
  kustomization: Record<string, unknown>,
  dir: string,
  file: string,
): Resource[] {
  let result = [...resources];
  for (const entry of asList<Record<string, unknown>>(kustomization['patches'], file, 'patches')) {
    const unknown = Object.keys(entry).filter((key) => !['path', 'patch', 'target'].includes(key));
    if (unknown.length > 0) throw new Error(`${file}: patch fields not implemented: ${unknown.join(', ')}`);
    const source = typeof entry['path'] === 'string' ? resolve(dir, entry['path']) : `${file} (inline patch)`;
    const text = typeof entry['path'] === 'string' ? readFileSync(source, 'utf8') : entry['patch'];
    if (typeof text !== 'string') throw new Error(`${file}: a patch needs path or patch`);
    const target = entry['target'] as PatchTarget | undefined;
    const documents = parseAllDocuments(text)
      .map((document) => document.toJS() as unknown)
      .filter((value) => value !== null);
    if (documents.length === 1 && Array.isArray(documents[0])) {
      if (target === undefined) throw new Error(`${source}: a JSON6902 patch needs a target`);
      for (const resource of matchTarget(result, target, source))
        resource.object = applyJson6902(resource.object, documents[0] as JsonOperation[], source);
      continue;
    }
    for (const patch of documents) {
      if (!isMap(patch) || !isMap(patch['metadata']))
        throw new Error(`${source}: a strategic-merge patch must be a Kubernetes object`);
      const matches =
        target !== undefined
          ? matchTarget(result, target, source)
          : result.filter(
              ({ object }) =>
                object.kind === patch['kind'] &&
                object.metadata.name === (patch['metadata'] as Record<string, unknown>)['name'] &&
                object.apiVersion === patch['apiVersion'],
            );
      if (matches.length !== 1 && target === undefined)
        throw new Error(
          `${source}: found ${matches.length} targets for the patch of ${String(patch['kind'])} ` +
            `${String((patch['metadata'] as Record<string, unknown>)['name'])},` +
            ` ` +
            `expected 1`,
        );
      if (patch['$patch'] === 'delete') {
        result = result.filter((resource) => !matches.includes(resource));
        continue;
      }
      // The patch's name only finds its target; the target keeps its own.
      const { name: _name, ...metadata } = patch['metadata'] as Record<string, unknown>;
      for (const resource of matches)
        resource.object = strategicMerge(resource.object, { ...patch, metadata }, []) as K8sObject;
    }
  }
  return result;
}

interface PatchTarget {
  group?: string;
  version?: string;
  kind?: string;
  name?: string;
  namespace?: string;
}

function matchTarget(resources: Resource[], target: PatchTarget, source: string): Resource[] {
  const unknown = Object.keys(target).filter((key) => !['group', 'version', 'kind', 'name', 'namespace'].includes(key));
  if (unknown.length > 0) throw new Error(`${source}: patch target fields not implemented: ${unknown.join(', ')}`);
  const matches = resources.filter(({ object }) => {
    const [group, version] = object.apiVersion.includes('/') ? object.apiVersion.split('/') : ['', object.apiVersion];
    return (
      (target.kind === undefined || target.kind === object.kind) &&
      (target.name === undefined || target.name === object.metadata.name) &&
      (target.namespace === undefined || target.namespace === object.metadata.namespace) &&
      (target.group === undefined || target.group === group) &&
      (target.version === undefined || target.version === version)
    );
  });
  if (matches.length === 0)
    throw new Error(`${source}: no resource matches the patch target ${JSON.stringify(target)}`);
  return matches;
}

/** Merge keys of the associative lists our patches touch (Kubernetes' patchMergeKey). */
function mergeKeyOf(field: string, items: readonly unknown[]): string | undefined {
  if (['containers', 'initContainers', 'ephemeralContainers', 'env', 'volumes', 'imagePullSecrets'].includes(field))
    return 'name';
  if (field === 'volumeMounts') return 'mountPath';
  if (field === 'ports') return items.some((item) => isMap(item) && 'containerPort' in item) ? 'containerPort' : 'port';
  return undefined;
}

/**
 * Strategic merge of `patch` into `target` (new objects, inputs untouched). Lists with a merge key:
 * the patch's items first (merged with their counterparts), then the target's other items, as
 * kustomize orders them; other lists are replaced.
 */
export function strategicMerge(target: unknown, patch: unknown, path: readonly string[]): unknown {
  if (!isMap(patch) || !isMap(target)) return structuredClone(patch);
  const directive = patch['$patch'];
  if (directive === 'replace') {
    const { $patch: _directive, ...rest } = patch;
    return structuredClone(rest);
  }
  if (directive !== undefined)
    throw new Error(`$patch: ${String(directive)} at ${path.join('.') || '(root)'} is not implemented`);
  const result: Record<string, unknown> = structuredClone(target);
  for (const [key, value] of Object.entries(patch)) {
    if (key.startsWith('$')) throw new Error(`${key} at ${[...path, key].join('.')} is not implemented`);
    if (value === null) {
      delete result[key];
      continue;
    }
    const current = result[key];
    if (Array.isArray(value) && Array.isArray(current)) {
      const mergeKey = mergeKeyOf(key, [...current, ...value]);
      if (mergeKey === undefined) {
        result[key] = structuredClone(value);
        continue;
      }
      const keyOf = (item: unknown): unknown => (isMap(item) ? item[mergeKey] : undefined);
      const patched = value.map((item) => {
        const counterpart = current.find((existing) => keyOf(existing) === keyOf(item));
        return counterpart === undefined ? structuredClone(item) : strategicMerge(counterpart, item, [...path, key]);
      });
      const untouched = current.filter((existing) => !value.some((item) => keyOf(item) === keyOf(existing)));
      result[key] = [...patched, ...structuredClone(untouched)];
    } else if (isMap(value) && isMap(current)) {
      result[key] = strategicMerge(current, value, [...path, key]);
    } else {
      result[key] = structuredClone(value);
    }
  }
  return result;
}

export interface JsonOperation {
  op: string;
  path: string;
  value?: unknown;
}

/** RFC 6902 `add`, `replace` and `remove` (the JSON-pointer `-` appends). */
export function applyJson6902(object: K8sObject, operations: readonly JsonOperation[], source: string): K8sObject {
  const result = structuredClone(object);
  for (const operation of operations) {
    const tokens = operation.path
      .split('/')
      .slice(1)
      .map((token) => token.replace(/~1/g, '/').replace(/~0/g, '~'));
    const last = tokens.pop();
    if (last === undefined) throw new Error(`${source}: ${operation.op} of the whole document is not implemented`);
    let parent: any = result;
    for (const token of tokens) {
      parent = Array.isArray(parent) ? parent[Number(token)] : parent?.[token];
      if (parent === undefined || parent === null)
        throw new Error(`${source}: ${operation.path}: ${token} does not exist`);
    }
    const exists = Array.isArray(parent) ? last === '-' || Number(last) < parent.length : last in parent;
    if (operation.op === 'add') {
      if (Array.isArray(parent))
        parent.splice(last === '-' ? parent.length : Number(last), 0, structuredClone(operation.value));
      else parent[last] = structuredClone(operation.value);
    } else if (operation.op === 'replace' || operation.op === 'remove') {
      if (!exists) throw new Error(`${source}: ${operation.op} ${operation.path}: nothing there`);
      if (operation.op === 'replace') parent[last] = structuredClone(operation.value);
      else if (Array.isArray(parent)) parent.splice(Number(last), 1);
      else delete parent[last];
    } else {
      throw new Error(`${source}: JSON6902 op ${operation.op} is not implemented`);
    }
  }
  return result;
}

function setNamespace(object: K8sObject, namespace: string): void {
  if (object.kind === 'Namespace') object.metadata.name = namespace;
  else if (!CLUSTER_SCOPED.has(object.kind)) object.metadata.namespace = namespace;
}

function addLabels(resources: readonly Resource[], entry: Record<string, unknown>, file: string): void {
  const unknown = Object.keys(entry).filter(
    (key) => key !== 'pairs' && !(['includeSelectors', 'includeTemplates'].includes(key) && entry[key] === false),
  );
  if (unknown.length > 0)
    throw new Error(`${file}: labels options not implemented: ${unknown.join(', ')} (only metadata labels)`);
  const pairs = entry['pairs'] as Record<string, string>;
  for (const { object } of resources) object.metadata.labels = { ...object.metadata.labels, ...pairs };
}

/**
 * Gives generated ConfigMaps kustomize's name suffix and rewrites the references to them. The hash is
 * kustomize's: sha256 of Go's JSON encoding of {data, kind, name}, where kustomize's lookup of
 * `metadata/name` finds nothing, so the name is always "" (sigs.k8s.io/kustomize/api/hasher).
 */
function finalizeNames(resources: readonly Resource[]): K8sObject[] {
  const renamed = new Map<string, string>();
  for (const { object, generated } of resources) {
    if (!generated) continue;
    const name = `${object.metadata.name}-${configMapHash(object['data'] as Record<string, string>)}`;
    renamed.set(object.metadata.name, name);
    object.metadata.name = name;
  }
  const objects = resources.map(({ object }) => object);
  for (const object of objects) {
    for (const pod of podSpecsOf(object)) {
      for (const container of [...(pod.containers ?? []), ...(pod.initContainers ?? [])]) {
        for (const env of container.env ?? []) {
          const ref = env.valueFrom?.configMapKeyRef;
          if (ref && renamed.has(ref.name)) ref.name = renamed.get(ref.name);
        }
        for (const source of container.envFrom ?? []) {
          if (source.configMapRef && renamed.has(source.configMapRef.name))
            source.configMapRef.name = renamed.get(source.configMapRef.name);
        }
      }
      for (const volume of pod.volumes ?? []) {
        if (volume.configMap && renamed.has(volume.configMap.name))
          volume.configMap.name = renamed.get(volume.configMap.name);
        for (const source of volume.projected?.sources ?? []) {
          if (source.configMap && renamed.has(source.configMap.name))
            source.configMap.name = renamed.get(source.configMap.name);
        }
      }
    }
  }
  return objects;
}

/** kustomize's ConfigMap name suffix for `data`. */
export function configMapHash(data: Record<string, string>): string {
  const sorted = Object.fromEntries(Object.entries(data).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  const encoded = goJson({ data: sorted, kind: 'ConfigMap', name: '' });
  const hex = createHash('sha256').update(encoded).digest('hex').slice(0, 10);
  return hex.replace(/[013ae]/g, (char) => ({ '0': 'g', '1': 'h', '3': 'k', a: 'm', e: 't' })[char] as string);
}

/** JSON as Go's encoding/json writes it: HTML characters and line/paragraph separators escaped. */
function goJson(value: unknown): string {
  return JSON.stringify(value).replace(
    /[<>&\u2028\u2029]/g,
    (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** The pod specs inside a workload object (Pod, Deployment, StatefulSet, DaemonSet, Job, CronJob). */
export function podSpecsOf(object: K8sObject): any[] {
  switch (object.kind) {
    case 'Pod':
      return object['spec'] ? [object['spec']] : [];
    case 'Deployment':
    case 'StatefulSet':
    case 'DaemonSet':
    case 'ReplicaSet':
    case 'Job':
      return object['spec']?.template?.spec ? [object['spec'].template.spec] : [];
    case 'CronJob':
      return object['spec']?.jobTemplate?.spec?.template?.spec ? [object['spec'].jobTemplate.spec.template.spec] : [];
    default:
      return [];
  }
}

function parseSingle(text: string, source: string): Record<string, unknown> {
  const value = parseAllDocuments(text)[0]?.toJS() as unknown;
  if (!isMap(value)) throw new Error(`${source}: not a mapping`);
  return value;
}

function asList<T>(value: unknown, file: string, field: string): T[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new Error(`${file}: ${field} must be a list`);
  return value as T[];
}

function isMap(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
