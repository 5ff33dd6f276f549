import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';

/**
 * Client API keys (docs/adr/0006-tenants-keys-limits.md, docs/security.md "Tenants"). A key is 32 random
 * bytes, base64url, behind a `kvr_` prefix that secret scanners can look for. Only its SHA-256 is ever
 * stored (in Redis or the key file): a fast hash suffices for a 256-bit random secret, and a slow KDF
 * would cost every request.
 */
export const API_KEY_PREFIX = 'kvr_';

/** What a key may see and do besides generating: `admin` and `bench` keys get the `X-Router-*` headers. */
export const API_KEY_ROLES = ['user', 'bench', 'admin'] as const;
export type ApiKeyRole = (typeof API_KEY_ROLES)[number];

/** A tenant's or a key's limits; absent = no limit of that kind. */
/** Flow control's priority classes, served in this order (flow/flow-control.ts). */
export const FLOW_PRIORITIES = ['high', 'normal', 'low'] as const;
export type FlowPriority = (typeof FLOW_PRIORITIES)[number];

export const LimitFields = {
  requestsPerMinute: z
    .number()
    .int()
    .positive()
    .optional()
    .describe('requests admitted per minute (a burst of this many, then one every 60 s ÷ it)'),
  tokensPerMinute: z
    .number()
    .int()
    .positive()
    .optional()
    .describe('tokens per minute: reserved at admission (prompt estimate + max_tokens), settled from usage'),
  concurrentRequests: z.number().int().positive().optional().describe('requests in flight at once'),
  priority: z
    .enum(FLOW_PRIORITIES)
    .optional()
    .describe('flow control: the priority class its requests queue in (high goes first; default normal)'),
  weight: z
    .number()
    .positive()
    .max(1_000)
    .optional()
    .describe("flow control: its share of a saturated pool's tokens against other tenants' (default 1)"),
  models: z
    .array(z.string().min(1).max(256))
    .min(1)
    .max(1_000)
    .optional()
    .describe(
      'the models its requests may name (an adapter whose base model is listed comes with it); others are 404 as if they did not exist; absent: every model',
    ),
};
export const Limits = z.strictObject(LimitFields);
export type Limits = z.infer<typeof Limits>;

/** Ids and tenants are shown in logs, metrics-free; kept short and printable. */
const NAME = z.string().regex(/^[A-Za-z0-9._:@-]{1,64}$/, 'must be 1–64 characters of A–Z a–z 0–9 . _ : @ -');

/** A key as stored (Redis hash value, key-file entry): who it is, never the secret. */
export const ApiKeyRecord = z.strictObject({
  id: NAME.describe('the key id: shown in logs and the admin API, used to revoke it'),
  tenant: NAME.describe('the tenant the key belongs to (a tenant may have several keys)'),
  role: z.enum(API_KEY_ROLES).default('user'),
  ...LimitFields,
  createdAtMs: z.number().int().nonnegative().optional(),
});
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;

/** SHA-256 hex of a key's secret: what is stored and looked up. */
export function digestOfApiKey(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

/** A new random key and its digest. The secret is shown once, to whoever asked for it. */
export function generateApiKey(random: (bytes: number) => Buffer = randomBytes): {
  readonly secret: string;
  readonly digest: string;
} {
  const secret = API_KEY_PREFIX + random(32).toString('base64url');
  return { secret, digest: digestOfApiKey(secret) };
}

/** Longest credential looked at: a real key is 47 characters; anything far longer is not hashed. */
const MAX_CREDENTIAL_CHARS = 256;

/**
 * The credential a request presents: `Authorization: Bearer <key>` (OpenAI clients), else `x-api-key`
 * (Anthropic clients). null: none, or not a plausible key (empty, oversized): such a request is 401.
 */
export function credentialOf(headers: Readonly<Record<string, string | string[] | undefined>>): string | null {
  const authorization = headers.authorization;
  if (typeof authorization === 'string') {
    const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization);
    const key = match?.[1];
    return key !== undefined && key.length <= MAX_CREDENTIAL_CHARS ? key : null;
  }
  const apiKey = headers['x-api-key'];
  return typeof apiKey === 'string' && apiKey !== '' && apiKey.length <= MAX_CREDENTIAL_CHARS ? apiKey : null;
}
