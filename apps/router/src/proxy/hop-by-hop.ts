/**
 * Headers that describe one connection, not the message (RFC 9110 §7.6.1): never forwarded. `host`
 * and `content-length` are set by the client library for the new hop.
 */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
  'expect',
]);

/**
 * Copies end-to-end headers, dropping hop-by-hop ones, any named in `Connection`, and those `alsoDrop`
 * says (lower-case name; header-hygiene.ts: credentials, cookies, address claims), in one pass: no
 * second walk over the copy, no `delete` (which turns the object into a slow dictionary).
 */
export function endToEndHeaders(
  headers: Record<string, string | string[] | undefined>,
  alsoDrop?: (lowerName: string) => boolean,
): Record<string, string | string[]> {
  const connectionTokens = String(headers.connection ?? '')
    .toLowerCase()
    .split(',')
    .map((token) => token.trim())
    .filter(Boolean);
  const result: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || connectionTokens.includes(lower) || alsoDrop?.(lower) === true) continue;
    result[lower] = value;
  }
  return result;
}
