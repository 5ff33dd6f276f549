import { seededRandom } from '@kvroute/workloads';
/**
 * The multi-replica tests' workload: 12 concurrent 6-turn conversations, each a shared system prompt
 * and a context of its own, sent round-robin over the given router URLs (or through one front URL),
 * and what each turn's response says about where it went and what it hit. Two shapes: SHORT_CHAT
 * (the original) and CHAT_WITH_CONTEXT (long own context, growing history, user pauses).
 */
export interface Turn {
  readonly conversation: number;
  readonly backend: string;
  readonly reason: string;
  readonly prompt: number;
  readonly cached: number;
}

/** The size of a conversation; the system prompt (~560 tokens with the chat template) is the same in every shape. */
export interface WorkloadShape {
  /** Repeats of the conversation's context phrase `item N detail; ` (≈ 5 tokens each). */
  readonly contextRepeats: number;
  /** `max_tokens` of every turn: the length of each assistant reply carried into the next turn. */
  readonly maxTokens: number;
  /** Sentences added to each follow-up question (` Explain it in more detail.`, 6 tokens each). */
  readonly followUpSentences: number;
  /** Conversation k starts k · startIntervalMs after the first. */
  readonly startIntervalMs: number;
  /** The user's pause between a reply and the next turn, ms, drawn uniformly from [min, max] by the run's seed. */
  readonly thinkTimeMs: readonly [min: number, max: number];
}

/** Short context (~760 tokens), 8-token replies, one-line follow-ups, no pause: each turn adds ~28 tokens. */
export const SHORT_CHAT: WorkloadShape = {
  contextRepeats: 150,
  maxTokens: 8,
  followUpSentences: 0,
  startIntervalMs: 15,
  thinkTimeMs: [0, 0],
};

/**
 * A conversation about material of its own: ~3,000 tokens of own context after the shared system
 * prompt (turn 1 ≈ 3,600 prompt tokens), 200-token replies and ~190-token follow-ups (the history
 * grows ~400 tokens a turn, to ~5,600), and a pause of 150–300 ms (seconds of simulated time at the
 * tests' timeScale) before each follow-up. Why this shape: replica-comparison.ts.
 */
export const CHAT_WITH_CONTEXT: WorkloadShape = {
  contextRepeats: 600,
  maxTokens: 200,
  followUpSentences: 30,
  startIntervalMs: 15,
  thinkTimeMs: [150, 300],
};

export interface RunOptions {
  /** `Connection: close` on every request, so an L4 balancer picks a replica per request. */
  readonly newConnectionPerRequest?: boolean;
  readonly shape?: WorkloadShape;
  /**
   * Varies the texts: equal seeds give equal conversations, different seeds share no prefix (not even
   * the system prompt's first routing block), so runs with different seeds cannot hit each other's
   * cache or routing state. Unset: the original texts.
   */
  readonly seed?: number;
}

export const CONVERSATIONS = 12;
const TURNS = 6;
const RUNBOOK = 'Cite the runbook section you used. '.repeat(60);

export async function runConversations(urls: readonly string[], options: RunOptions = {}): Promise<Turn[]> {
  const shape = options.shape ?? SHORT_CHAT;
  const tag = options.seed === undefined ? '' : ` ${options.seed}`;
  const system = `You are the assistant of a routing team${tag}. ${RUNBOOK}`;
  const [minThinkMs, maxThinkMs] = shape.thinkTimeMs;
  const turns: Turn[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONVERSATIONS }, async (_, conversation) => {
      await new Promise((resolve) => setTimeout(resolve, conversation * shape.startIntervalMs));
      // One generator per conversation: its pauses do not depend on how the others' turns interleave.
      const random = seededRandom((options.seed ?? 0) * 1000 + conversation);
      const messages: Array<{ role: string; content: string }> = [
        { role: 'system', content: system },
        {
          role: 'user',
          content: `Conversation${tag} ${conversation} context: ${`item ${conversation} detail; `.repeat(shape.contextRepeats)}`,
        },
      ];
      for (let turn = 0; turn < TURNS; turn++) {
        const thinkMs = turn === 0 ? 0 : minThinkMs + random() * (maxThinkMs - minThinkMs);
        if (thinkMs > 0) await new Promise((resolve) => setTimeout(resolve, thinkMs));
        const url = urls[next++ % urls.length] as string;
        const response = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          // A new connection per request lets an L4 balancer spread the turns over replicas.
          headers: {
            'content-type': 'application/json',
            ...(options.newConnectionPerRequest ? { connection: 'close' } : {}),
          },
          body: JSON.stringify({ model: 'test-model', messages, max_tokens: shape.maxTokens }),
        });
        const body = (await response.json()) as {
          choices: Array<{ message: { content: string } }>;
          usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } | null };
        };
        turns.push({
          conversation,
          backend: response.headers.get('x-router-backend') ?? '',
          reason: response.headers.get('x-router-reason') ?? '',
          prompt: body.usage.prompt_tokens,
          cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0,
        });
        messages.push(
          { role: 'assistant', content: body.choices[0]?.message.content ?? '' },
          {
            role: 'user',
            content: `Follow-up ${turn}: and item ${turn * 3}?${' Explain it in more detail.'.repeat(shape.followUpSentences)}`,
          },
        );
      }
    }),
  );
  return turns;
}

export function hitRate(turns: readonly Turn[]): number {
  return turns.reduce((sum, turn) => sum + turn.cached, 0) / turns.reduce((sum, turn) => sum + turn.prompt, 0);
}

/**
 * Turns that changed backend without a spill and lost cache by it: a conversation stays home unless its
 * home's queue was judged too costly (reason `spilled-*`), after which the new backend is home. A turn
 * may go back to an earlier backend that holds the same number of 256-byte routing blocks (a turn adds
 * less than a block, so it can tie with home): that backend still serves all but the last few tokens
 * from cache, so it is not a move. A real move shows as cached tokens falling short of the previous
 * turn's prompt by more than a block (~64 tokens). Counted per conversation found in `turns`, so any
 * workload of these turns (this one, affinity.test.ts's) can use it.
 */
export function unexplainedMoves(turns: readonly Turn[]): number {
  let moves = 0;
  for (const conversation of new Set(turns.map((turn) => turn.conversation))) {
    let previous: Turn | undefined;
    for (const turn of turns.filter((candidate) => candidate.conversation === conversation)) {
      const moved = previous !== undefined && turn.backend !== previous.backend && !turn.reason.startsWith('spilled');
      if (moved && previous !== undefined && turn.cached < previous.prompt - 64) moves++;
      previous = turn;
    }
  }
  return moves;
}
