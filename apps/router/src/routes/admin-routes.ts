import type { FastifyBaseLogger, FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { peerOf } from '../admin/admin-auth';
import type { BackendAddressPolicy } from '../admin/backend-address-policy';
import type { BackendChangeOutcome, BackendChanges } from '../backends/backend-changes';
import { backendIdOf, type BackendRegistry } from '../backends/backend-registry';
import { BackendConfig } from '../config';
import { RouterError } from '../errors';
import { validateBody } from '../http/validate-body';
import { ApiKeyRecord, generateApiKey } from '../tenants/api-key';

export interface AdminRoutesOptions {
  /** Where an added backend may be (backendAllowlist, the SSRF denials): checked before anything connects. */
  readonly addressPolicy: BackendAddressPolicy;
  /** One line per change: who (peer), what, outcome. Never the token. */
  readonly audit: FastifyBaseLogger;
  readonly registry: BackendRegistry;
  readonly changes: BackendChanges;
  /** In-flight requests per backend as this replica knows them (fleet-wide with Redis). */
  readonly inflight: () => ReadonlyMap<string, number>;
  /** Version of the shared backend set this replica routes by (null without Redis). */
  readonly sharedVersion: () => number | null;
  /** The API keys in Redis (`/admin/keys`); null without Redis (keys then come from the key file only). */
  readonly apiKeys: AdminKeyStore | null;
  /** Wall-clock ms (a new key's `createdAtMs`). */
  readonly nowMs: () => number;
}

/** What the admin API needs of the key store (libs/redis-store RedisApiKeyStore). */
export interface AdminKeyStore {
  add(id: string, digest: string, recordJson: string): Promise<boolean>;
  revoke(id: string): Promise<boolean>;
  list(): Promise<string[]>;
}

/** Body of `POST /admin/keys`: who the key is for and its limits; the id defaults to a random one. */
const AddKeyBody = ApiKeyRecord.omit({ createdAtMs: true }).extend({ id: ApiKeyRecord.shape.id.optional() });
const KeyIdParams = z.strictObject({ id: ApiKeyRecord.shape.id });

/**
 * Ids end up in response headers (`X-Router-Backend`), metric labels and URLs: letters, digits and
 * `._:@-` only, so an admin typo cannot produce a header that breaks responses.
 */
const BACKEND_ID = /^[A-Za-z0-9._:@-]{1,128}$/;

/** Body of `POST /admin/backends`: a backend as in the config file; `id` defaults to the URL's host:port. */
export const AddBackendBody = BackendConfig.extend({
  id: z.string().regex(BACKEND_ID, 'letters, digits and ._:@- only (1-128)').optional(),
});

/** An admin body is one backend spec: a few hundred bytes. */
const ADMIN_BODY_LIMIT_BYTES = 64 * 1024;

/**
 * A backend id in a path: a chosen id, or the default one (the URL's host:port), which for an IPv6 backend
 * is bracketed (`[::1]:8000`, sent as `%5B::1%5D:8000`): whatever add accepts, delete, drain and undrain
 * must name.
 */
const DEFAULT_IPV6_ID = /^\[[0-9A-Fa-f:.]{2,45}\](?::\d{1,5})?$/;
const BackendIdParams = z.strictObject({
  id: z.string().refine((id) => BACKEND_ID.test(id) || DEFAULT_IPV6_ID.test(id), 'not a backend id'),
});

/**
 * The admin API, on the admin listener (admin-app.ts), whose gate checks `Authorization: Bearer
 * <adminToken>` before any body is read; errors have the OpenAI error shape.
 *
 * - `GET /admin/backends`: every backend this replica knows, with drained flag and in-flight count.
 * - `POST /admin/backends` `{url, id?, models?, weight?}`: adds one (201; 409 if the id or URL is taken).
 * - `DELETE /admin/backends/:id`: removes one; its requests in flight finish.
 * - `POST /admin/backends/:id/drain`, `/undrain`: no new requests / new requests again.
 *
 * - `GET /admin/keys`: the client API keys in Redis (records, never secrets or digests).
 * - `POST /admin/keys` `{tenant, id?, role?, requestsPerMinute?, tokensPerMinute?, concurrentRequests?, models?}`:
 *   a new key; the answer (201) carries its secret, the only time it is ever shown.
 * - `DELETE /admin/keys/:id`: revokes a key; every replica stops taking it within `apiKeyCacheMs`.
 *
 * With Redis a change goes to the fleet's shared set, so every replica applies it (within a poll
 * interval); without, it applies to this replica only (keys: 503, the key file is the place).
 */
export async function adminRoutes(app: FastifyInstance, options: AdminRoutesOptions): Promise<void> {
  const { audit } = options;
  /** Runs one change and writes its audit line whatever the outcome (done, refused, failed). */
  const audited = async <T>(
    request: FastifyRequest,
    what: Record<string, unknown>,
    run: () => Promise<T>,
  ): Promise<T> => {
    const entry = { peer: peerOf(request), source: options.changes.source, ...what };
    try {
      const result = await run();
      audit.info({ ...entry, outcome: 'done' }, `admin: ${String(what.action)} done`);
      return result;
    } catch (error) {
      const code = error instanceof RouterError ? error.code : 'ROUTER_ERR_INTERNAL';
      audit.warn(
        { ...entry, outcome: 'refused', code, reason: error instanceof Error ? error.message : String(error) },
        `admin: ${String(what.action)} refused`,
      );
      throw error;
    }
  };
  // Drain, undrain and delete take no body, and clients send an empty one with a JSON content type: here
  // (and only here: the generation routes reject it) an empty body is no body.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string', bodyLimit: ADMIN_BODY_LIMIT_BYTES }, (_request, body, done) => {
    const text = body as string;
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch (error) {
      done(
        new RouterError('ROUTER_ERR_INVALID_JSON', `The request body is not valid JSON: ${(error as Error).message}`),
        undefined,
      );
    }
  });

  app.get('/admin/backends', async () => {
    const inflight = options.inflight();
    return {
      object: 'list',
      source: options.changes.source,
      version: options.sharedVersion(),
      data: options.registry.backends.map((backend) => ({
        id: backend.id,
        url: backend.url,
        models: options.registry.modelsOf(backend.id),
        modelsConfigured: backend.configuredModels !== null,
        weight: backend.info.weight,
        drained: options.registry.isDrained(backend.id),
        inflight: inflight.get(backend.id) ?? 0,
        breaker: backend.breaker.state,
        role: backend.role,
        ...(backend.bootstrapPort === null ? {} : { bootstrapPort: backend.bootstrapPort }),
      })),
    };
  });

  app.post('/admin/backends', async (request, reply) => {
    const spec = validateBody(AddBackendBody, request.body);
    const id = backendIdOf(spec);
    return audited(request, { action: 'add', backend: id, url: withoutCredentials(spec.url) }, async () => {
      // Before anything else touches the URL: a refused one gets no connection attempt (not even model discovery).
      const verdict = await options.addressPolicy.check(spec.url);
      if (!verdict.allowed)
        throw new RouterError(
          'ROUTER_ERR_BACKEND_NOT_ALLOWED',
          `${withoutCredentials(spec.url)} is not an allowed backend: ${verdict.reason}.`,
          { param: 'url' },
        );
      const sameUrl = options.registry.findByUrl(spec.url);
      if (sameUrl)
        throw new RouterError(
          'ROUTER_ERR_BACKEND_EXISTS',
          `${spec.url} is already in the backend set as \`${sameUrl.id}\`.`,
          { param: 'url' },
        );
      expectDone(await change(() => options.changes.add(spec)), id);
      return reply
        .code(201)
        .send({ id, url: spec.url, models: spec.models ?? null, weight: spec.weight, drained: false });
    });
  });

  app.delete('/admin/backends/:id', async (request) => {
    const { id } = parseParams(request.params);
    return audited(request, { action: 'remove', backend: id }, async () => {
      expectDone(await change(() => options.changes.remove(id)), id);
      return { id, removed: true };
    });
  });

  const keyStore = (): AdminKeyStore => {
    if (options.apiKeys === null)
      throw new RouterError(
        'ROUTER_ERR_KEYS_UNAVAILABLE',
        'API keys are managed here only with Redis (redisUrl); without it, use apiKeysFile.',
      );
    return options.apiKeys;
  };
  const storeCall = async <T>(run: () => Promise<T>): Promise<T> => {
    try {
      return await run();
    } catch (error) {
      throw new RouterError(
        'ROUTER_ERR_KEYS_UNAVAILABLE',
        'The API keys cannot be changed right now (Redis unreachable); nothing was changed.',
        { retryAfterSeconds: 1, cause: error },
      );
    }
  };

  app.get('/admin/keys', async () => {
    const stored = await storeCall(() => keyStore().list());
    const data = stored.flatMap((json) => {
      try {
        const parsed = ApiKeyRecord.safeParse(JSON.parse(json));
        return parsed.success ? [parsed.data] : [];
      } catch {
        return [];
      }
    });
    return { object: 'list', data: data.sort((a, b) => a.id.localeCompare(b.id)) };
  });

  app.post('/admin/keys', async (request, reply) => {
    const spec = validateBody(AddKeyBody, request.body);
    const store = keyStore();
    const { secret, digest } = generateApiKey();
    const record: ApiKeyRecord = { ...spec, id: spec.id ?? `key-${digest.slice(0, 12)}`, createdAtMs: options.nowMs() };
    return audited(
      request,
      { action: 'add-key', key: record.id, tenant: record.tenant, role: record.role },
      async () => {
        if (!(await storeCall(() => store.add(record.id, digest, JSON.stringify(record)))))
          throw new RouterError('ROUTER_ERR_KEY_EXISTS', `A key \`${record.id}\` already exists.`, { param: 'id' });
        return reply.code(201).send({ ...record, key: secret });
      },
    );
  });

  app.delete('/admin/keys/:id', async (request) => {
    const parsed = KeyIdParams.safeParse(request.params);
    if (!parsed.success) throw new RouterError('ROUTER_ERR_INVALID_REQUEST', 'Invalid key id.', { param: 'id' });
    const { id } = parsed.data;
    const store = keyStore();
    return audited(request, { action: 'revoke-key', key: id }, async () => {
      if (!(await storeCall(() => store.revoke(id))))
        throw new RouterError('ROUTER_ERR_KEY_NOT_FOUND', `There is no key \`${id}\`.`, { param: 'id' });
      return { id, revoked: true };
    });
  });

  for (const [action, drained] of [
    ['drain', true],
    ['undrain', false],
  ] as const) {
    app.post(`/admin/backends/:id/${action}`, async (request) => {
      const { id } = parseParams(request.params);
      return audited(request, { action, backend: id }, async () => {
        expectDone(await change(() => options.changes.setDrained(id, drained)), id);
        return { id, drained };
      });
    });
  }
}

/** Runs a change; a failure to reach the shared set (Redis away) is a 503 and changed nothing. */
async function change(run: () => Promise<BackendChangeOutcome>): Promise<BackendChangeOutcome> {
  try {
    return await run();
  } catch (error) {
    throw new RouterError(
      'ROUTER_ERR_BACKEND_SET_UNAVAILABLE',
      'The shared backend set cannot be changed right now (Redis unreachable); nothing was changed.',
      {
        retryAfterSeconds: 1,
        cause: error,
      },
    );
  }
}

function expectDone(outcome: BackendChangeOutcome, id: string): void {
  if (outcome === 'unknown')
    throw new RouterError('ROUTER_ERR_BACKEND_NOT_FOUND', `There is no backend \`${id}\`.`, { param: 'id' });
  if (outcome === 'exists')
    throw new RouterError('ROUTER_ERR_BACKEND_EXISTS', `A backend \`${id}\` already exists.`, { param: 'id' });
}

function parseParams(params: unknown): z.infer<typeof BackendIdParams> {
  const result = BackendIdParams.safeParse(params);
  if (!result.success)
    throw new RouterError(
      'ROUTER_ERR_INVALID_REQUEST',
      'Invalid backend id: letters, digits and ._:@- only (1-128), or a bracketed IPv6 host:port.',
      {
        param: 'id',
      },
    );
  return result.data;
}

/**
 * A URL as the audit log and error messages may show it: `user:password@` blanked (such URLs are
 * refused, but the refusal is logged, and a password must not reach the log on the way).
 */
function withoutCredentials(rawUrl: string): string {
  try {
    const url = new URL(rawUrl);
    if (url.username === '' && url.password === '') return rawUrl;
    url.username = '';
    url.password = '';
    return `${url.toString()} (credentials removed)`;
  } catch {
    return '(not a URL)';
  }
}
