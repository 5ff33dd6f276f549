/**
 * The tests' kustomize (k8s-kustomize.ts) against what kustomize 5.5 (`kubectl kustomize`) does: the
 * expected values below were read off kubectl, and k8s.system.test.ts builds the same fixture with
 * kubectl and compares.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { FEATURE_OVERLAY, writeKustomization } from './k8s-fixtures';
import { applyJson6902, buildKustomization, configMapHash, strategicMerge, type K8sObject } from './k8s-kustomize';

describe('kustomize name suffix hash', () => {
  it('matches kustomize 5.5 (name left out, Go JSON escaping)', () => {
    expect(configMapHash({ k: 'v' })).toBe('bdg947hgcc');
    expect(configMapHash({ backends: '' })).toBe('5bc42cf58d');
    expect(configMapHash({ z: '<a & b>', a: '…' })).toBe('8m87gf9kb6');
  });
});

describe('strategic merge', () => {
  const target = {
    containers: [
      {
        name: 'a',
        image: 'x',
        env: [
          { name: 'A', value: '1' },
          { name: 'B', value: '2' },
        ],
        args: ['1', '2'],
      },
      { name: 'b', image: 'y' },
    ],
  };

  it('merges containers and env by name, patch items first, and replaces plain lists', () => {
    const patch = {
      containers: [
        { name: 'c', image: 'z' },
        {
          name: 'a',
          env: [
            { name: 'C', value: '3' },
            { name: 'B', value: '22' },
          ],
          args: ['q'],
        },
      ],
    };
    expect(strategicMerge(target, patch, [])).toEqual({
      containers: [
        { name: 'c', image: 'z' },
        {
          name: 'a',
          image: 'x',
          env: [
            { name: 'C', value: '3' },
            { name: 'B', value: '22' },
            { name: 'A', value: '1' },
          ],
          args: ['q'],
        },
        { name: 'b', image: 'y' },
      ],
    });
  });

  it('deletes a field set to null and leaves its input untouched', () => {
    const merged = strategicMerge(target, { containers: [{ name: 'a', args: null }] }, []) as typeof target;
    expect(merged.containers[0]).toEqual({ name: 'a', image: 'x', env: target.containers[0]?.env });
    expect(target.containers[0]?.args).toEqual(['1', '2']);
  });

  it('refuses directives it does not implement', () => {
    expect(() => strategicMerge(target, { containers: [{ name: 'a', $patch: 'delete' }] }, [])).toThrow(
      /\$patch: delete at containers is not implemented/,
    );
  });
});

describe('JSON6902 patches', () => {
  const object: K8sObject = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'x' },
    data: { a: '1' },
    list: ['p', 'q'],
  };

  it('adds, appends, replaces and removes', () => {
    const patched = applyJson6902(
      object,
      [
        { op: 'add', path: '/data/b', value: '2' },
        { op: 'add', path: '/list/-', value: 'r' },
        { op: 'replace', path: '/data/a', value: '10' },
        { op: 'remove', path: '/list/0' },
      ],
      'test',
    );
    expect(patched).toMatchObject({ data: { a: '10', b: '2' }, list: ['q', 'r'] });
    expect(object['data']).toEqual({ a: '1' });
  });

  it('fails on a path that is not there', () => {
    expect(() => applyJson6902(object, [{ op: 'replace', path: '/data/zz', value: '1' }], 'test')).toThrow(
      /nothing there/,
    );
    expect(() => applyJson6902(object, [{ op: 'add', path: '/spec/x', value: 1 }], 'test')).toThrow(
      /spec does not exist/,
    );
  });
});

describe('building kustomizations', () => {
  const fixture = writeKustomization(FEATURE_OVERLAY);
  afterAll(() => fixture.remove());
  const objects = buildKustomization(`${fixture.dir}/overlay`);
  const byKind = (kind: string): K8sObject => objects.find((object) => object.kind === kind) as K8sObject;

  it('merges generators, hashes names and rewrites the references', () => {
    const name = `settings-${configMapHash({ config: 'b', other: 'b' })}`;
    expect(byKind('ConfigMap').metadata.name).toBe(name);
    const pod = byKind('Deployment')['spec'].template.spec;
    expect(pod.volumes[0].configMap.name).toBe(name);
    expect(
      pod.containers[0].env.find((env: { name: string }) => env.name === 'CONFIG').valueFrom.configMapKeyRef.name,
    ).toBe(name);
  });

  it('applies components, patches, namespace (renaming the Namespace) and labels', () => {
    const deployment = byKind('Deployment');
    expect(deployment['spec'].replicas).toBe(3);
    expect(deployment['spec'].template.spec.containers[0].image).toBe('example/main:2');
    expect(deployment['spec'].template.spec.containers[0].env[0]).toEqual({ name: 'FROM_COMPONENT', value: 'yes' });
    expect(deployment.metadata).toMatchObject({ namespace: 'two', labels: { team: 'infra' } });
    expect(deployment['spec'].template.metadata.labels).toEqual({ app: 'app' });
    expect(byKind('Namespace').metadata).toEqual({ name: 'two', labels: { team: 'infra' } });
  });
});
