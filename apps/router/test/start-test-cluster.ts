import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterCloseOptions, type RouterServer } from '../src/create-router';

/**
 * A real cluster on loopback for router tests: vllm-sim backends and one router replica, all in this
 * process, each on its own free port, talking real HTTP.
 */
/** The admin token startTestCluster gives a router with `debugRoutes` (the debug route is behind it). */
export const TEST_ADMIN_TOKEN = 'test-admin-token-0123456789';

export interface TestCluster {
  readonly routerUrl: string;
  /** The ops listener (/metrics, the full /readyz), on its own loopback port. */
  readonly opsUrl: string;
  /** The admin listener (admin API, /debug/route), on its own loopback port; null without an admin token. */
  readonly adminUrl: string | null;
  /** POST /debug/route on the admin listener, with the admin token. */
  debugRoute(body: string): Promise<Response>;
  readonly router: RouterServer;
  readonly sims: readonly { readonly url: string; readonly sim: SimServer; readonly id: string }[];
  registry(): RouterServer['registry'];
  /** Closes the router (with `options`: `{ graceMs: 0 }` skips the second a graceful close waits for quiet connections), then the sims. */
  close(options?: RouterCloseOptions): Promise<void>;
}

export async function startTestCluster(
  options: {
    backends?: number;
    sim?: Partial<SimConfig>;
    sims?: ReadonlyArray<Partial<SimConfig>>;
    router?: Partial<RouterConfig>;
  } = {},
): Promise<TestCluster> {
  const simConfigs = options.sims ?? Array.from({ length: options.backends ?? 3 }, () => options.sim ?? {});
  const sims = await Promise.all(
    simConfigs.map(async (overrides) => {
      const sim = await createSimServer(
        SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model', ...options.sim, ...overrides }),
      );
      const url = await sim.listen();
      return { url, sim, id: new URL(url).host };
    }),
  );
  const adminToken =
    options.router?.debugRoutes === true && options.router.adminToken === undefined
      ? { adminToken: TEST_ADMIN_TOKEN }
      : {};
  const router = await createRouterServer(
    RouterConfig.parse({
      host: '127.0.0.1',
      port: 0,
      opsPort: 0,
      adminHost: '127.0.0.1',
      adminPort: 0,
      backends: sims.map((sim) => sim.url),
      retryBackoffMs: 1,
      ...adminToken,
      ...options.router,
    }),
  );
  const routerUrl = await router.listen();
  const token = options.router?.adminToken ?? TEST_ADMIN_TOKEN;
  return {
    routerUrl,
    opsUrl: router.opsUrl as string,
    adminUrl: router.adminUrl,
    debugRoute: (body) =>
      fetch(`${router.adminUrl ?? 'http://no-admin-listener.invalid'}/debug/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body,
      }),
    router,
    sims,
    registry: () => router.registry,
    async close(closeOptions) {
      await router.close(closeOptions);
      await Promise.all(sims.map((sim) => sim.sim.close()));
    },
  };
}

/** Sum of in-flight leases across backends. */
export function totalInflight(router: RouterServer): number {
  let total = 0;
  for (const count of router.state.inflightCounts().values()) total += count;
  return total;
}

export async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error('condition not met in time');
}
