/**
 * The tests' kustomize (k8s-kustomize.ts) against the real one (system test: needs `kubectl` with
 * kustomize 5, i.e. kubectl ≥ 1.27; it needs no cluster). Every kustomization the other k8s tests
 * build, and the feature fixture of k8s-kustomize.test.ts, must come out object for object the same.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  FEATURE_OVERLAY,
  K8S_DIR,
  LOCAL_WITH_MANAGED_REDIS,
  kubectlKustomize,
  sortObjects,
  writeKustomization,
} from './k8s-fixtures';
import { buildKustomization } from './k8s-kustomize';

describe('kubectl kustomize builds the same objects as the tests’ loader', () => {
  it.each(['base', 'overlays/local', 'overlays/a100', 'overlays/pd-vllm', 'overlays/public'])('%s', (path) => {
    expect(sortObjects(buildKustomization(join(K8S_DIR, path)))).toEqual(
      sortObjects(kubectlKustomize(join(K8S_DIR, path))),
    );
  });

  it('overlays/local + components/managed-redis', () => {
    const fixture = writeKustomization({ 'kustomization.yaml': LOCAL_WITH_MANAGED_REDIS });
    try {
      expect(sortObjects(buildKustomization(fixture.dir))).toEqual(sortObjects(kubectlKustomize(fixture.dir)));
    } finally {
      fixture.remove();
    }
  });

  it('the feature overlay of k8s-kustomize.test.ts (components, generators, patches, namespace, labels)', () => {
    const fixture = writeKustomization(FEATURE_OVERLAY);
    try {
      expect(sortObjects(buildKustomization(`${fixture.dir}/overlay`))).toEqual(
        sortObjects(kubectlKustomize(`${fixture.dir}/overlay`)),
      );
    } finally {
      fixture.remove();
    }
  });
});
