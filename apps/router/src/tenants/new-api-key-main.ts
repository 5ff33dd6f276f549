/**
 * `npm run api-key -- --tenant acme [--id acme-prod] [--role user|bench|admin] [--requests-per-minute N]
 * [--tokens-per-minute N] [--concurrent-requests N]`: prints a new API key's secret (once: it is stored
 * nowhere) and the entry to paste into the key file (`apiKeysFile`), which holds only its SHA-256.
 * For keys in Redis, use the admin API instead (`POST /admin/keys`).
 */
import { parseCommandLine } from '@kvroute/platform/command-line';

const values = parseCommandLine(
  {
    usage: 'npm run api-key -- --tenant NAME [options]   (installed: kvroute api-key --tenant NAME [options])',
    summary:
      "Prints a new API key's secret (once: it is stored nowhere) and the entry to paste under `keys:` in the\n" +
      'key file (apiKeysFile), which holds only its SHA-256. For keys in Redis, use POST /admin/keys instead.',
    options: {
      tenant: { type: 'string', description: 'the tenant the key belongs to (required)' },
      id: { type: 'string', description: "the key's id (default: TENANT-<first 8 hex digits of its SHA-256>)" },
      role: { type: 'string', default: 'user', description: 'user | bench | admin' },
      'requests-per-minute': { type: 'string', value: 'number', description: "the key's own request limit" },
      'tokens-per-minute': { type: 'string', value: 'number', description: "the key's own token limit" },
      'concurrent-requests': { type: 'string', value: 'number', description: "the key's own in-flight limit" },
    },
  },
  'api-key',
);
// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { readableIssueMap, toFlagName } = await import('@kvroute/platform');
const { ApiKeyRecord, generateApiKey } = await import('./api-key');
const number = (text: string | undefined): number | undefined => (text === undefined ? undefined : Number(text));
const { secret, digest } = generateApiKey();
const parsed = ApiKeyRecord.safeParse(
  {
    id: values.id ?? `${values.tenant ?? 'key'}-${digest.slice(0, 8)}`,
    tenant: values.tenant,
    role: values.role,
    requestsPerMinute: number(values['requests-per-minute']),
    tokensPerMinute: number(values['tokens-per-minute']),
    concurrentRequests: number(values['concurrent-requests']),
  },
  { error: readableIssueMap() },
);
if (!parsed.success) {
  const issue = parsed.error.issues[0];
  const flag = issue === undefined ? '' : `--${toFlagName(String(issue.path[0] ?? ''))}`;
  console.error(`api-key: ${flag}: ${issue?.message ?? 'is not valid'} (see --help)`);
  process.exit(2);
}
const entry = Object.entries({ ...parsed.data, sha256: digest })
  .filter(([, value]) => value !== undefined)
  .map(([name, value], index) => `${index === 0 ? '  - ' : '    '}${name}: ${String(value)}`)
  .join('\n');
console.log(
  `The key (shown once; give it to the tenant, keep it nowhere else):\n\n  ${secret}\n\nThe key file entry (under \`keys:\`):\n\n${entry}\n`,
);
