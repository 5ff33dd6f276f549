/**
 * Test fixtures for the Kubernetes manifests: where they are, throwaway kustomizations on top of them,
 * and the real `kubectl kustomize` when this machine has it (to check our loader against it).
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

/** Whether `kubectl kustomize` runs here (it needs no cluster). */
export const hasKubectl: boolean = spawnSync('kubectl', ['kustomize', '--help'], { encoding: 'utf8', timeout: 20_000 }).status === 0;

/** `kubectl kustomize dir`, parsed. */
export function kubectlKustomize(dir: string): K8sObject[] {
  const result = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8', timeout: 60_000, maxBuffer: 64 * 1024 * 1024 });
  if (result.status !== 0) throw new Error(`kubectl kustomize ${dir} failed: ${result.stderr}`);
  return parseYamlObjects(result.stdout, `kubectl kustomize ${dir}`);
}

/** Objects in a stable order (kind, namespace, name), for comparing two builds. */
export function sortObjects(objects: readonly K8sObject[]): K8sObject[] {
  const key = (object: K8sObject): string => `${object.kind}/${object.metadata.namespace ?? ''}/${object.metadata.name}`;
  return [...objects].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

/** The one object of `kind` named `name`; throws when it is missing. */
export function findObject(objects: readonly K8sObject[], kind: string, name: string): K8sObject {
  const found = objects.filter((object) => object.kind === kind && object.metadata.name === name);
  if (found.length !== 1) throw new Error(`expected one ${kind}/${name}, found ${found.length} among ${objects.map((object) => `${object.kind}/${object.metadata.name}`).join(', ')}`);
  return found[0] as K8sObject;
}

/** The one object of `kind` whose name starts with `prefix` (generated ConfigMaps carry a hash suffix). */
export function findGenerated(objects: readonly K8sObject[], kind: string, prefix: string): K8sObject {
  const found = objects.filter((object) => object.kind === kind && new RegExp(`^${prefix}-[a-z0-9]{10}$`).test(object.metadata.name));
  if (found.length !== 1) throw new Error(`expected one generated ${kind} ${prefix}-<hash>, found ${found.length}`);
  return found[0] as K8sObject;
}
