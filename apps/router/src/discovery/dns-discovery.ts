import { isIP } from 'node:net';
import {
  capBackends,
  discoveredId,
  discoveredUrl,
  type BackendSource,
  type DiscoveredBackend,
  type DiscoveryAnswer,
} from './backend-source';
import type { DiscoveryTarget } from './discovery-target';

/** What DNS discovery asks of a resolver: node:dns/promises `Resolver` (its servers set by the caller). */
export interface DnsResolver {
  resolve4(name: string): Promise<string[]>;
  resolve6(name: string): Promise<string[]>;
  resolveSrv(name: string): Promise<Array<{ name: string; port: number; priority: number; weight: number }>>;
  /** Cancels the queries under way (stop). */
  cancel?(): void;
}

/**
 * Error codes (node:dns) meaning "the name has no such records": NXDOMAIN and NOERROR without answers.
 * These are answers (the set is empty); every other error (SERVFAIL, REFUSED, timeout, no server) is a
 * failure that says nothing about the backends.
 */
const NO_RECORDS = new Set(['ENOTFOUND', 'ENODATA']);

/** Records of a name; `[]` when it has none, a rejection when the server did not answer. */
async function records<T>(lookup: Promise<T[]>): Promise<T[]> {
  try {
    return await lookup;
  } catch (error) {
    if (NO_RECORDS.has((error as NodeJS.ErrnoException).code ?? '')) return [];
    throw error;
  }
}

/** The A and AAAA addresses of a name (an IP literal is its own address), valid ones only. */
async function addressesOf(resolver: DnsResolver, host: string): Promise<string[]> {
  const bare = host.replace(/\.$/, '');
  if (isIP(bare) !== 0) return [bare];
  const [v4, v6] = await Promise.all([records(resolver.resolve4(bare)), records(resolver.resolve6(bare))]);
  return [...v4.filter((address) => isIP(address) === 4), ...v6.filter((address) => isIP(address) === 6)];
}

export interface DnsLookOptions {
  readonly target: Extract<DiscoveryTarget, { kind: 'dns' | 'dns+srv' }>;
  readonly resolver: DnsResolver;
  readonly scheme: 'http' | 'https';
  /** Most backends taken from one answer (and SRV targets looked up): bounds the work of a huge answer. */
  readonly maxBackends: number;
}

/** One look at the records: the backends they name now, or why they could not be read. Never throws. */
export async function lookUpDnsBackends(options: DnsLookOptions): Promise<DiscoveryAnswer> {
  const { target, resolver, scheme, maxBackends } = options;
  const backend = (address: string, port: number): DiscoveredBackend => ({
    id: discoveredId(target.name, address, port),
    url: discoveredUrl(scheme, address, port),
    draining: false,
  });
  try {
    if (target.kind === 'dns') {
      const addresses = await addressesOf(resolver, target.host);
      return {
        kind: 'backends',
        ...capBackends(
          addresses.map((address) => backend(address, target.port)),
          maxBackends,
        ),
      };
    }
    const srv = (await records(resolver.resolveSrv(target.service.replace(/\.$/, '')))).filter(
      (record) =>
        Number.isInteger(record.port) &&
        record.port > 0 &&
        record.port < 65_536 &&
        typeof record.name === 'string' &&
        record.name !== '' &&
        record.name !== '.',
    );
    // SRV priority and weight are not used: every target is a backend, the router balances by load.
    // Bounded: at most maxBackends targets are looked up, the same ones on every replica.
    const targets = srv.sort((a, b) => (a.name === b.name ? a.port - b.port : a.name < b.name ? -1 : 1));
    const looked = targets.slice(0, maxBackends);
    const found = await Promise.all(
      looked.map(async (record) =>
        (await addressesOf(resolver, record.name)).map((address) => backend(address, record.port)),
      ),
    );
    const capped = capBackends(found.flat(), maxBackends);
    return { kind: 'backends', backends: capped.backends, dropped: capped.dropped + (targets.length - looked.length) };
  } catch (error) {
    return { kind: 'failed', error };
  }
}

export interface DnsBackendSourceOptions extends DnsLookOptions {
  /** ms between the end of one look and the start of the next. */
  readonly refreshMs: number;
}

/**
 * Looks at the records every `refreshMs` (a look never overlaps the previous one) and hands each
 * answer to the applier. The resolver asks its configured servers directly: no cache in between but
 * theirs, so a record's change shows within one refresh once the server has it.
 */
export class DnsBackendSource implements BackendSource {
  readonly kind: string;
  readonly name: string;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly options: DnsBackendSourceOptions) {
    this.kind = options.target.kind;
    this.name = options.target.name;
  }

  async start(onAnswer: (answer: DiscoveryAnswer) => Promise<void>): Promise<void> {
    const look = async (): Promise<void> => {
      const answer = await lookUpDnsBackends(this.options);
      if (this.stopped) return;
      // The applier never rejects (it logs); a rejection here would only stop the loop.
      await onAnswer(answer).catch(() => undefined);
    };
    const schedule = (): void => {
      if (this.stopped) return;
      this.timer = setTimeout(() => {
        this.running = look().finally(schedule);
      }, this.options.refreshMs);
      this.timer.unref();
    };
    this.running = look();
    await this.running;
    schedule();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.options.resolver.cancel?.();
    await this.running.catch(() => undefined);
  }
}
