/**
 * The text of kvroute-file-keys.ts: the top-level keys each app reading the shared kvroute.yaml knows. Written by
 * `npm run docs:config` from the schemas; each app's config-doc test fails when its list is stale.
 */
export function renderKvrouteFileKeys(keysByApp: Readonly<Record<string, readonly string[]>>): string {
  const apps = Object.entries(keysByApp).map(
    ([app, keys]) => `  ${app}: [\n${keys.map((key) => `    '${key}',`).join('\n')}\n  ],`,
  );
  return (
    '// Generated from the router and poller config schemas by `npm run docs:config`; do not edit by hand.\n' +
    '// The top-level keys of the shared kvroute.yaml each app knows: a key only another app knows is left to it,\n' +
    '// a key no app knows is refused (load-config.ts).\n' +
    `export const KVROUTE_FILE_KEYS = {\n${apps.join('\n')}\n} as const;\n`
  );
}
