/**
 * The `job` label the Prometheus Operator gives the targets of the ServiceMonitors and PodMonitors of a
 * rendered kustomization, and the `job` matchers of its PrometheusRules, so that a test can hold one
 * against the other. An alert on `up{job="kvroute-poller"}` only fires if some monitor's targets carry
 * exactly that job; the operator's defaults make that easy to miss:
 *
 * - a PodMonitor's targets get `job="<namespace>/<monitor name>"`;
 * - a ServiceMonitor's get `job="<service name>"`;
 * - `jobLabel: L` replaces either with the value of label L (of the pod, or of the Service), when the
 *   object carries it with a non-empty value;
 * - an endpoint's own `relabelings` come after those and may rewrite `job` again.
 *
 * This is the operator's scrape-config generation (prometheus-operator `pkg/prometheus/promcfg.go`),
 * modelled for the fields these manifests may use; a relabeling of `job` it cannot model is reported as
 * a problem rather than guessed.
 */
import { parsePromql } from './promql';
import { podSpecsOf, type K8sObject } from './k8s-kustomize';

export interface OperatorTarget {
  /** `PodMonitor/name` or `ServiceMonitor/name`. */
  readonly monitor: string;
  /** The workload whose pods are scraped (`Deployment/kvroute-router`). */
  readonly workload: string;
  readonly port: string;
  readonly job: string;
}

export interface RuleJobMatcher {
  readonly alert: string;
  readonly op: string;
  readonly value: string;
}

interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: Array<{ key: string; operator: string; values?: string[] }>;
}

interface Relabeling {
  action?: string;
  sourceLabels?: string[];
  separator?: string;
  regex?: string;
  replacement?: string;
  targetLabel?: string;
}

const WORKLOAD_KINDS = new Set(['Deployment', 'StatefulSet', 'DaemonSet', 'Job', 'Pod']);

/** Prometheus' label-name form of a Kubernetes label key (`app.kubernetes.io/name` → `app_kubernetes_io_name`). */
function sanitize(key: string): string {
  return key.replace(/[^a-zA-Z0-9_]/g, '_');
}

export function selects(selector: LabelSelector | undefined, labels: Readonly<Record<string, string>>): boolean {
  // An empty selector selects everything, as in Kubernetes.
  for (const [key, value] of Object.entries(selector?.matchLabels ?? {})) if (labels[key] !== value) return false;
  for (const expression of selector?.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, expression.key);
    const value = labels[expression.key];
    const values = expression.values ?? [];
    const ok =
      expression.operator === 'In'
        ? has && values.includes(value as string)
        : expression.operator === 'NotIn'
          ? !has || !values.includes(value as string)
          : expression.operator === 'Exists'
            ? has
            : expression.operator === 'DoesNotExist'
              ? !has
              : false;
    if (!ok) return false;
  }
  return true;
}

/** The namespaces a monitor looks in: its `namespaceSelector`, else its own. `null`: every namespace. */
function monitorNamespaces(monitor: K8sObject): Set<string> | null {
  const namespaceSelector = monitor['spec']?.namespaceSelector;
  if (namespaceSelector?.any === true) return null;
  if (Array.isArray(namespaceSelector?.matchNames)) return new Set(namespaceSelector.matchNames as string[]);
  return new Set([monitor.metadata.namespace ?? 'default']);
}

function inNamespaces(object: K8sObject, namespaces: Set<string> | null): boolean {
  return namespaces === null || namespaces.has(object.metadata.namespace ?? 'default');
}

function podLabelsOf(workload: K8sObject): Record<string, string> {
  return (workload.kind === 'Pod' ? workload.metadata.labels : workload['spec']?.template?.metadata?.labels) as Record<
    string,
    string
  >;
}

function containerPortNames(workload: K8sObject): string[] {
  return podSpecsOf(workload).flatMap((pod) =>
    (pod.containers ?? []).flatMap((container: { ports?: Array<{ name?: string }> }) =>
      (container.ports ?? []).flatMap((port) => (port.name === undefined ? [] : [port.name])),
    ),
  );
}

/**
 * Applies an endpoint's relabelings to `job`. `meta` holds the `__meta_kubernetes_…` labels of the
 * target that a relabeling may read. Returns the new job, or a problem when a relabeling touches `job`
 * in a way this model does not follow.
 */
function relabelJob(
  job: string,
  relabelings: readonly Relabeling[],
  meta: Readonly<Record<string, string>>,
): { job: string } | { problem: string } {
  let current = job;
  for (const relabeling of relabelings) {
    const action = relabeling.action ?? 'replace';
    if (relabeling.targetLabel !== 'job') {
      if (/^(labeldrop|labelkeep)$/i.test(action) && new RegExp(`^(?:${relabeling.regex ?? '(.*)'})$`).test('job'))
        return { problem: `a ${action} relabeling may drop the job label` };
      continue;
    }
    if (action.toLowerCase() !== 'replace') return { problem: `a ${action} relabeling of job` };
    const source = (relabeling.sourceLabels ?? [])
      .map((name) => (name === 'job' ? current : (meta[name] ?? '')))
      .join(relabeling.separator ?? ';');
    const match = new RegExp(`^(?:${relabeling.regex ?? '(.*)'})$`).exec(source);
    if (match === null) continue;
    current = (relabeling.replacement ?? '$1').replace(
      /\$\{(\d+)\}|\$(\d+)/g,
      (_, braced, bare) => match[Number(braced ?? bare)] ?? '',
    );
  }
  return { job: current };
}

function metaLabels(prefix: string, labels: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).map(([key, value]) => [`${prefix}${sanitize(key)}`, value]));
}

/**
 * Every target the Operator would scrape for the monitors among `objects`, with its job; and problems:
 * a monitor that selects nothing, an endpoint port no selected pod (or Service) names, a relabeling the
 * model cannot follow.
 */
export function operatorTargets(objects: readonly K8sObject[]): { targets: OperatorTarget[]; problems: string[] } {
  const targets: OperatorTarget[] = [];
  const problems: string[] = [];
  const workloads = objects.filter((object) => WORKLOAD_KINDS.has(object.kind));

  for (const monitor of objects.filter((object) => object.kind === 'PodMonitor')) {
    const name = `PodMonitor/${monitor.metadata.name}`;
    const namespaces = monitorNamespaces(monitor);
    const selected = workloads.filter(
      (workload) => inNamespaces(workload, namespaces) && selects(monitor['spec']?.selector, podLabelsOf(workload)),
    );
    if (selected.length === 0) problems.push(`${name} selects no pods`);
    const jobLabel = monitor['spec']?.jobLabel as string | undefined;
    for (const endpoint of monitor['spec']?.podMetricsEndpoints ?? []) {
      for (const workload of selected) {
        const where = `${name} → ${workload.kind}/${workload.metadata.name}`;
        if (!containerPortNames(workload).includes(endpoint.port)) {
          problems.push(`${where}: the pods have no container port named ${String(endpoint.port)}`);
          continue;
        }
        const labels = podLabelsOf(workload);
        const byLabel = jobLabel === undefined ? undefined : labels[jobLabel];
        const job =
          byLabel !== undefined && byLabel !== ''
            ? byLabel
            : `${monitor.metadata.namespace ?? 'default'}/${monitor.metadata.name}`;
        const relabelled = relabelJob(
          job,
          endpoint.relabelings ?? [],
          metaLabels('__meta_kubernetes_pod_label_', labels),
        );
        if ('problem' in relabelled) problems.push(`${where}: ${relabelled.problem}`);
        else
          targets.push({
            monitor: name,
            workload: `${workload.kind}/${workload.metadata.name}`,
            port: endpoint.port,
            job: relabelled.job,
          });
      }
    }
  }

  for (const monitor of objects.filter((object) => object.kind === 'ServiceMonitor')) {
    const name = `ServiceMonitor/${monitor.metadata.name}`;
    const namespaces = monitorNamespaces(monitor);
    const services = objects.filter(
      (object) =>
        object.kind === 'Service' &&
        inNamespaces(object, namespaces) &&
        selects(monitor['spec']?.selector, (object.metadata.labels ?? {}) as Record<string, string>),
    );
    if (services.length === 0) problems.push(`${name} selects no Service`);
    const jobLabel = monitor['spec']?.jobLabel as string | undefined;
    for (const endpoint of monitor['spec']?.endpoints ?? []) {
      for (const service of services) {
        const where = `${name} → Service/${service.metadata.name}`;
        if (!(service['spec']?.ports ?? []).some((port: { name?: string }) => port.name === endpoint.port)) {
          problems.push(`${where}: the Service has no port named ${String(endpoint.port)}`);
          continue;
        }
        const serviceLabels = (service.metadata.labels ?? {}) as Record<string, string>;
        const byLabel = jobLabel === undefined ? undefined : serviceLabels[jobLabel];
        const job = byLabel !== undefined && byLabel !== '' ? byLabel : service.metadata.name;
        const backing = workloads.filter(
          (workload) =>
            workload.metadata.namespace === service.metadata.namespace &&
            service['spec']?.selector !== undefined &&
            selects({ matchLabels: service['spec'].selector }, podLabelsOf(workload)),
        );
        if (backing.length === 0) problems.push(`${where}: the Service selects no pods`);
        for (const workload of backing) {
          const meta = {
            ...metaLabels('__meta_kubernetes_service_label_', serviceLabels),
            ...metaLabels('__meta_kubernetes_pod_label_', podLabelsOf(workload)),
          };
          const relabelled = relabelJob(job, endpoint.relabelings ?? [], meta);
          if ('problem' in relabelled) problems.push(`${where}: ${relabelled.problem}`);
          else
            targets.push({
              monitor: name,
              workload: `${workload.kind}/${workload.metadata.name}`,
              port: endpoint.port,
              job: relabelled.job,
            });
        }
      }
    }
  }
  return { targets, problems };
}

/** The `job` matchers of every alert of every PrometheusRule among `objects`. */
export function ruleJobMatchers(objects: readonly K8sObject[]): RuleJobMatcher[] {
  return objects
    .filter((object) => object.kind === 'PrometheusRule')
    .flatMap((rule) => (rule['spec']?.groups ?? []) as Array<{ rules: Array<{ alert?: string; expr: string }> }>)
    .flatMap((group) => group.rules)
    .flatMap((rule) =>
      parsePromql(rule.expr)
        .matchers.filter((matcher) => matcher.label === 'job')
        .map((matcher) => ({ alert: rule.alert ?? rule.expr, op: matcher.op, value: matcher.value })),
    );
}

/** Whether a job matcher selects a target with this job (PromQL regexes are anchored). */
export function matcherSelects(matcher: RuleJobMatcher, job: string): boolean {
  switch (matcher.op) {
    case '=':
      return job === matcher.value;
    case '!=':
      return job !== matcher.value;
    case '=~':
      return new RegExp(`^(?:${matcher.value})$`).test(job);
    case '!~':
      return !new RegExp(`^(?:${matcher.value})$`).test(job);
    default:
      throw new Error(`unknown PromQL match operator ${matcher.op}`);
  }
}

/**
 * Alerts whose job matcher selects none of the targets: `KvroutePollerDown: job="kvroute-poller", but the
 * monitors produce kvroute/kvroute-poller, kvroute-router`.
 */
export function unmatchedRuleJobs(objects: readonly K8sObject[]): string[] {
  const jobs = [...new Set(operatorTargets(objects).targets.map((target) => target.job))].sort();
  return ruleJobMatchers(objects)
    .filter((matcher) => !jobs.some((job) => matcherSelects(matcher, job)))
    .map(
      (matcher) =>
        `${matcher.alert}: job${matcher.op}"${matcher.value}", but the monitors produce ${jobs.length === 0 ? 'no targets' : jobs.join(', ')}`,
    );
}
