/**
 * SGLang's prefill/decode handshake as the sim plays it (README "Prefill/decode"): the router sends one body with
 * `bootstrap_host`, `bootstrap_port` and `bootstrap_room` to a prefill and a decode engine at once. The prefill sim
 * opens the room when its prefill is done (its blocks held for the decode side); the decode sim asks the prefill sim's
 * bootstrap address for the room (`GET /sim/bootstrap/rooms/<room>`, waiting until it opens), then pulls the KV as the
 * NIXL decode side does. SGLang's bootstrap server is a separate port (8998 by default); the sim serves it on its HTTP
 * port, which the router is told as the backend's bootstrap port.
 */
export interface OpenRoom {
  /** The prefill engine's id of the request whose blocks are held (what `/sim/kv-transfer/done` frees). */
  readonly requestId: string;
  /** Prompt tokens the prefill side computed. */
  readonly tokens: number;
}

interface Waiter {
  readonly resolve: (room: OpenRoom | null) => void;
  readonly timer: NodeJS.Timeout;
}

export class BootstrapRooms {
  readonly #open = new Map<string, { room: OpenRoom; timer: NodeJS.Timeout }>();
  readonly #waiters = new Map<string, Waiter[]>();

  /** `keepMs`: how long an open room waits to be asked for (the prefill side's lease). */
  constructor(private readonly keepMs: number) {}

  open(room: string, opened: OpenRoom): void {
    const waiters = this.#waiters.get(room) ?? [];
    this.#waiters.delete(room);
    for (const waiter of waiters) {
      clearTimeout(waiter.timer);
      waiter.resolve(opened);
    }
    const timer = setTimeout(() => this.#open.delete(room), this.keepMs);
    timer.unref();
    this.#open.get(room)?.timer.close();
    this.#open.set(room, { room: opened, timer });
  }

  /** The room once it opens (at once if it is open), or null after `timeoutMs`. */
  wait(room: string, timeoutMs: number): Promise<OpenRoom | null> {
    const open = this.#open.get(room);
    if (open !== undefined) return Promise.resolve(open.room);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        const left = (this.#waiters.get(room) ?? []).filter((waiter) => waiter.timer !== timer);
        if (left.length === 0) this.#waiters.delete(room);
        else this.#waiters.set(room, left);
        resolve(null);
      }, timeoutMs);
      timer.unref();
      this.#waiters.set(room, [...(this.#waiters.get(room) ?? []), { resolve, timer }]);
    });
  }

  close(): void {
    for (const { timer } of this.#open.values()) clearTimeout(timer);
    for (const waiters of this.#waiters.values())
      for (const waiter of waiters) {
        clearTimeout(waiter.timer);
        waiter.resolve(null);
      }
    this.#open.clear();
    this.#waiters.clear();
  }
}
