/** The admin API as a client calls it: one request to an admin listener (or any listener: a 404 is an answer too). */
export interface AdminOptions {
  /** JSON-encoded into the body. */
  readonly body?: unknown;
  /** Sent as the bearer token; null: no Authorization header. */
  readonly token: string | null;
  /** Sent as it is instead of `body` (broken JSON, an empty body). */
  readonly rawBody?: string;
}

/** Calls `method path` on `baseUrl` with the token; the status, the parsed JSON body (null when empty) and the headers. */
export async function adminRequest(
  baseUrl: string,
  method: string,
  path: string,
  options: AdminOptions,
): Promise<{ status: number; body: any; headers: Headers }> {
  const headers: Record<string, string> = {};
  if (options.token !== null) headers.authorization = `Bearer ${options.token}`;
  const body = options.rawBody ?? (options.body === undefined ? undefined : JSON.stringify(options.body));
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${baseUrl}${path}`, { method, headers, body });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null, headers: response.headers };
}
