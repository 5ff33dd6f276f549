import { backendIdOf, type BackendRegistry, type BackendSpec } from './backend-registry';

/** What changing one backend came to: `unknown` = no backend with that id; `exists` = the id is taken. */
export type BackendChangeOutcome = 'done' | 'unknown' | 'exists';

/**
 * Changes to the set of backends the router routes over (the admin API's operations). Without Redis they
 * apply to this replica's registry (`LocalBackendChanges`); with Redis they go to the fleet's shared set
 * and every replica applies them (`SharedBackendSet`). Once a call resolves, this replica routes by the
 * change. A call that cannot be made (Redis away) rejects and changes nothing.
 */
export interface BackendChanges {
  /** Where the set lives: this replica's memory, or the fleet's Redis. */
  readonly source: 'local' | 'shared';
  add(spec: BackendSpec): Promise<BackendChangeOutcome>;
  remove(id: string): Promise<BackendChangeOutcome>;
  setDrained(id: string, drained: boolean): Promise<BackendChangeOutcome>;
}

/** The changes of a replica without Redis: its registry is the whole truth. */
export class LocalBackendChanges implements BackendChanges {
  readonly source = 'local';

  constructor(private readonly registry: BackendRegistry) {}

  async add(spec: BackendSpec): Promise<BackendChangeOutcome> {
    if (this.registry.get(backendIdOf(spec))) return 'exists';
    this.registry.add(spec);
    return 'done';
  }

  async remove(id: string): Promise<BackendChangeOutcome> {
    return this.registry.remove(id) ? 'done' : 'unknown';
  }

  async setDrained(id: string, drained: boolean): Promise<BackendChangeOutcome> {
    return this.registry.setDrained(id, drained) ? 'done' : 'unknown';
  }
}
