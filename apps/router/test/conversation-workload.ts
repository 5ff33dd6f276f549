/**
 * The multi-replica tests' workload: 12 concurrent 6-turn conversations, each a shared system prompt
 * and a context of its own, sent round-robin over the given router URLs (or through one front URL),
 * and what each turn's response says about where it went and what it hit.
 */
export interface Turn {
  readonly conversation: number;
  readonly backend: string;
  readonly reason: string;
  readonly prompt: number;
  readonly cached: number;
}

export const CONVERSATIONS = 12;
const TURNS = 6;
const SYSTEM = `You are the assistant of a routing team. ${'Cite the runbook section you used. '.repeat(60)}`;

export async function runConversations(urls: readonly string[], options: { newConnectionPerRequest?: boolean } = {}): Promise<Turn[]> {
  const turns: Turn[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONVERSATIONS }, async (_, conversation) => {
      await new Promise((resolve) => setTimeout(resolve, conversation * 15));
      const messages: Array<{ role: string; content: string }> = [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: `Conversation ${conversation} context: ${`item ${conversation} detail; `.repeat(150)}` },
      ];
      for (let turn = 0; turn < TURNS; turn++) {
        const url = urls[next++ % urls.length] as string;
        const response = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          // A new connection per request lets an L4 balancer spread the turns over replicas.
          headers: { 'content-type': 'application/json', ...(options.newConnectionPerRequest ? { connection: 'close' } : {}) },
          body: JSON.stringify({ model: 'test-model', messages, max_tokens: 8 }),
        });
        const body = (await response.json()) as { choices: Array<{ message: { content: string } }>; usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } | null } };
        turns.push({
          conversation,
          backend: response.headers.get('x-router-backend') ?? '',
          reason: response.headers.get('x-router-reason') ?? '',
          prompt: body.usage.prompt_tokens,
          cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0,
        });
        messages.push({ role: 'assistant', content: body.choices[0]?.message.content ?? '' }, { role: 'user', content: `Follow-up ${turn}: and item ${turn * 3}?` });
      }
    }),
  );
  return turns;
}

export function hitRate(turns: readonly Turn[]): number {
  return turns.reduce((sum, turn) => sum + turn.cached, 0) / turns.reduce((sum, turn) => sum + turn.prompt, 0);
}

/**
 * Turns that changed backend without a spill and lost cache by it. A turn may go back to an earlier
 * backend that holds the same number of 256-byte routing blocks (a turn adds less than a block): that
 * backend still serves all but the last few tokens from cache, so it is not a move. A real move shows
 * as cached tokens falling short of the previous turn's prompt by more than a block (~64 tokens).
 */
export function unexplainedMoves(turns: readonly Turn[]): number {
  let moves = 0;
  for (let conversation = 0; conversation < CONVERSATIONS; conversation++) {
    let previous: Turn | undefined;
    for (const turn of turns.filter((candidate) => candidate.conversation === conversation)) {
      const moved = previous !== undefined && turn.backend !== previous.backend && !turn.reason.startsWith('spilled');
      if (moved && previous !== undefined && turn.cached < previous.prompt - 64) moves++;
      previous = turn;
    }
  }
  return moves;
}
