/**
 * Plain-fetch chat requests for tests that watch where requests go while the backend set changes
 * (discovery, the shared set): each prompt differs (a counter), so no two requests share a prefix.
 */
let sequence = 0;

/** One short chat request: its status and the backend that answered (`x-router-backend`). */
export async function chat(baseUrl: string, model: string): Promise<{ status: number; backend: string | null }> {
  const response = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: `question ${sequence++}` }], max_tokens: 2 }),
  });
  await response.text();
  return { status: response.status, backend: response.headers.get('x-router-backend') };
}

/**
 * A stream that runs for seconds (`maxTokens` output tokens: 400 take ~4 s on an `a100-7b` sim); resolves with its
 * backend once the headers are in, and with its text (and when it ended, performance.now()) at the end.
 */
export async function longStream(
  baseUrl: string,
  model: string,
  maxTokens = 400,
): Promise<{ backend: string; done: Promise<{ status: number; text: string; endedAtMs: number }> }> {
  const response = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model,
      messages: [{ role: 'user', content: `a long answer ${sequence++}` }],
      max_tokens: maxTokens,
      stream: true,
    }),
  });
  const done = response.text().then((text) => ({ status: response.status, text, endedAtMs: performance.now() }));
  return { backend: response.headers.get('x-router-backend') as string, done };
}
