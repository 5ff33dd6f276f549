/**
 * The seed llm-router's multi-turn workload: S concurrent sessions × T serial turns over a shared
 * system prompt, an optional per-session code context, user turns and tool-call loops. Pure and
 * deterministic from the seed; sessions are independent streams (session k is the same whatever S is).
 *
 * A session is a prefix plus a list of steps; the request of turn t is the prefix, then for every
 * earlier turn its step's messages and the assistant's reply, then turn t's own messages. The reply is
 * only known at run time, so `sessionMessages` takes the replies the runner got; turns without one get
 * the step's placeholder (what a flattened trace holds).
 */
import { seededRandom } from '@kvroute/workloads';
import type { ChatEvent, WorkloadMessage } from './events';
import { byArrival } from './events';
import { mixSeed, padTo, randomChars, wordBytes, wordText } from './text';

export interface SessionsOptions {
  readonly sessions: number;
  readonly turns: number;
  readonly seed: number;
  /** L: bytes of the system prompt, byte-identical in every session. */
  readonly systemPromptBytes: number;
  /** C: bytes of the per-session code context (a user message after the system prompt); 0 for none. */
  readonly codeContextBytes: number;
  /** Share of sessions that get a code context. */
  readonly codeContextProbability: number;
  /** U: random bytes of each user turn (after its `turn N: ` head). */
  readonly userTurnBytes: number;
  /** p: probability per turn of a tool-call loop (assistant tool call + tool result before the request). */
  readonly toolLoopProbability: number;
  readonly toolResultBytes: number;
  readonly maxTokens: number;
  /** Session k starts at a uniform offset in [0, startJitterMs). */
  readonly startJitterMs: number;
  /** Pause between a reply and the session's next turn: fixed, or uniform in [min, max]. */
  readonly thinkMs: number | readonly [min: number, max: number];
  /**
   * `seed`: the seed's texts (`"system: be helpful and concise. "` padded with `s`, `"// code context\n"`
   * padded with `c`, so the code context is the same in every session that has one); `words`: word text
   * keyed by the seed (code contexts differ per session), which tokenizes like prose rather than merging runs.
   */
  readonly filler: 'seed' | 'words';
  /** Placeholder assistant reply: `ack` (the seed's `ack tN`) or `max-tokens` (≈ maxTokens tokens of words). */
  readonly placeholderReply: 'ack' | 'max-tokens';
}

/** The seed's cloud sweep (scripts/bench/cloud-vllm.sh); set `sessions` and `seed` per point. */
export const SEED_SESSIONS: SessionsOptions = {
  sessions: 4,
  turns: 8,
  seed: 17,
  systemPromptBytes: 6144,
  codeContextBytes: 1536,
  codeContextProbability: 0.4,
  userTurnBytes: 80,
  toolLoopProbability: 0.3,
  toolResultBytes: 64,
  maxTokens: 64,
  startJitterMs: 200,
  thinkMs: 40,
  filler: 'seed',
  placeholderReply: 'ack',
};

export interface SessionStep {
  readonly turn: number;
  /** Pause after the previous turn's reply (0 on turn 0). */
  readonly thinkMs: number;
  /** Messages appended before this turn's request: the user turn, then the tool loop if any. */
  readonly messages: readonly WorkloadMessage[];
  readonly maxTokens: number;
  readonly placeholderReply: string;
}

export interface Session {
  readonly id: string;
  readonly startMs: number;
  /** System prompt, then the code context if the session has one. */
  readonly prefix: readonly WorkloadMessage[];
  readonly steps: readonly SessionStep[];
}

export function generateSessions(options: SessionsOptions): Session[] {
  const system =
    options.filler === 'seed'
      ? padTo('system: be helpful and concise. ', options.systemPromptBytes, 's')
      : padTo('system: be helpful and concise. ', 32, ' ') +
        wordBytes(options.systemPromptBytes - 32, mixSeed(options.seed, 1));
  return Array.from({ length: options.sessions }, (_, index) =>
    generateSession(options, index, system.slice(0, options.systemPromptBytes)),
  );
}

function generateSession(options: SessionsOptions, index: number, system: string): Session {
  const random = seededRandom(mixSeed(options.seed, 2, index));
  const startMs = Math.floor(random() * options.startJitterMs);
  const prefix: WorkloadMessage[] = [{ role: 'system', content: system }];
  if (options.codeContextBytes > 0 && random() < options.codeContextProbability) {
    const head = '// code context\n';
    const content =
      options.filler === 'seed'
        ? padTo(head, options.codeContextBytes, 'c')
        : (head + wordBytes(options.codeContextBytes, mixSeed(options.seed, 3, index))).slice(
            0,
            options.codeContextBytes,
          );
    prefix.push({ role: 'user', content });
  }
  const steps: SessionStep[] = [];
  for (let turn = 0; turn < options.turns; turn++) {
    const thinkMs = turn === 0 ? 0 : drawThink(options.thinkMs, random);
    const messages: WorkloadMessage[] = [
      { role: 'user', content: `turn ${turn}: ${randomChars(options.userTurnBytes, random)}` },
    ];
    if (random() < options.toolLoopProbability) {
      messages.push(
        { role: 'assistant', content: `calling tool[${turn}]` },
        { role: 'tool', name: 'search', content: randomChars(options.toolResultBytes, random) },
      );
    }
    const placeholderReply =
      options.placeholderReply === 'ack'
        ? `ack t${turn}`
        : wordText(options.maxTokens, mixSeed(options.seed, 4, index, turn)).trimStart();
    steps.push({ turn, thinkMs, messages, maxTokens: options.maxTokens, placeholderReply });
  }
  return { id: `s${index}`, startMs, prefix, steps };
}

function drawThink(think: SessionsOptions['thinkMs'], random: () => number): number {
  if (typeof think === 'number') return think;
  const [min, max] = think;
  return Math.round(min + random() * (max - min));
}

/**
 * The messages of turn `turn`'s request: prefix, each earlier turn's messages and reply (`replies[i]`,
 * else its placeholder), then this turn's messages.
 */
export function sessionMessages(session: Session, turn: number, replies: readonly string[] = []): WorkloadMessage[] {
  const step = session.steps[turn];
  if (step === undefined) throw new RangeError(`session ${session.id} has no turn ${turn}`);
  const messages: WorkloadMessage[] = [...session.prefix];
  for (let earlier = 0; earlier < turn; earlier++) {
    const previous = session.steps[earlier] as SessionStep;
    messages.push(...previous.messages, { role: 'assistant', content: replies[earlier] ?? previous.placeholderReply });
  }
  messages.push(...step.messages);
  return messages;
}

/**
 * Every turn as a chat event with placeholder replies, by arrival. `atMs` of a later turn assumes zero
 * service time (start + think times); a runner keeps turns serial through `session` and may rebuild
 * the messages with real replies from the `Session`s.
 */
export function sessionEvents(sessions: readonly Session[]): ChatEvent[] {
  const events: ChatEvent[] = [];
  for (const session of sessions) {
    let atMs = session.startMs;
    for (const step of session.steps) {
      atMs += step.thinkMs;
      events.push({
        id: `${session.id}-t${step.turn}`,
        atMs,
        kind: 'chat',
        maxTokens: step.maxTokens,
        session: { id: session.id, turn: step.turn, thinkMs: step.thinkMs },
        messages: sessionMessages(session, step.turn),
      });
    }
  }
  return byArrival(events) as ChatEvent[];
}
