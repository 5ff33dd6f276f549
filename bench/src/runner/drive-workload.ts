/**
 * Drives one workload through the routers and keeps a record per request.
 *
 * - Sessions run closed loop: a session's turn t is sent `thinkMs` after turn t−1's reply ended and
 *   carries the whole conversation so far, with the replies the backends really gave.
 * - Agent sessions too, request by request: each tool round's streamed call (its id, name and
 *   arguments, read from the SSE events) goes into the next request with the round's tool result; a
 *   round that brought no call (failed, or a stream without one, recorded as an error) goes on with its
 *   placeholder call, a failed answer with its placeholder answer, so the conversation stays well-formed.
 * - Events (poisson, traces) run open loop: each is sent at its arrival offset whatever is in flight,
 *   up to `maxInflight` (beyond it an arrival waits for a slot, so a saturated cluster cannot make the
 *   client open sockets without bound).
 * - Requests go to the routers in turn (one per request), as an L4 balancer with short connections
 *   would spread them: the hardest case for replicas that share state.
 * - After `maxRunMs` nothing new is sent; what is in flight finishes.
 */
import type { Agent } from 'undici';
import {
  agentRequest,
  agentRequestCount,
  sessionMessages,
  type AgentSession,
  type AgentTurnTranscript,
  type RequestEvent,
  type Session,
  type WorkloadToolCall,
} from '../workloads';
import type { Workload } from './scenario';
import { sendStreaming, type RunRequestRecord, type SendInput, type SendResult } from './request-client';

export interface DriveClock {
  /** Monotonic ms. */
  now(): number;
  sleep(ms: number): Promise<void>;
}

export const REAL_CLOCK: DriveClock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms))),
};

export interface DriveOptions {
  readonly routers: readonly string[];
  readonly model: string;
  readonly agent: Agent;
  readonly maxRunMs: number;
  readonly maxInflight: number;
  readonly extraBody?: Readonly<Record<string, unknown>>;
  readonly clock?: DriveClock;
  /**
   * Sessions one after another instead of all at once (events: pass maxInflight 1): the bound replay
   * (compulsory-bound.ts), which wants each request to see every earlier one's cache.
   */
  readonly serial?: boolean;
  /** Called after every finished request (progress). */
  readonly onDone?: (record: RunRequestRecord) => void;
}

export interface DriveResult {
  readonly requests: RunRequestRecord[];
  /** First send → last reply, ms. */
  readonly wallMs: number;
  /** Requests the deadline kept from being sent. */
  readonly skipped: number;
}

export function requestCount(workload: Workload): number {
  switch (workload.kind) {
    case 'sessions':
      return workload.sessions.reduce((sum, session) => sum + session.steps.length, 0);
    case 'agentic':
      return workload.sessions.reduce((sum, session) => sum + agentRequestCount(session), 0);
    case 'events':
      return workload.events.length;
  }
}

export async function driveWorkload(workload: Workload, options: DriveOptions): Promise<DriveResult> {
  const clock = options.clock ?? REAL_CLOCK;
  const start = clock.now();
  const requests: RunRequestRecord[] = [];
  let nextRouter = 0;
  let skipped = 0;
  const deadlinePassed = (): boolean => clock.now() - start >= options.maxRunMs;

  /** `expectsToolCall`: a 2xx stream without a call is recorded with an error (the conversation cannot use it). */
  const send = async (
    id: string,
    body: SendInput['body'],
    maxTokens: number,
    expectsToolCall = false,
  ): Promise<SendResult> => {
    const router = nextRouter;
    nextRouter = (nextRouter + 1) % options.routers.length;
    const sentAtMs = clock.now() - start;
    const result = await sendStreaming(
      options.agent,
      {
        baseUrl: options.routers[router] as string,
        model: options.model,
        body,
        maxTokens,
        extraBody: options.extraBody,
      },
      () => clock.now(),
    );
    const missingCall = expectsToolCall && result.record.error === undefined && result.toolCalls.length === 0;
    const full: RunRequestRecord = {
      id,
      router,
      sentAtMs,
      ...result.record,
      ...(missingCall ? { error: 'the stream carried no tool call' } : {}),
    };
    requests.push(full);
    options.onDone?.(full);
    return result;
  };

  if (workload.kind === 'sessions') {
    const runSession = async (session: Session): Promise<void> => {
      await clock.sleep(session.startMs);
      const replies: string[] = [];
      for (const step of session.steps) {
        if (step.thinkMs > 0) await clock.sleep(step.thinkMs);
        if (deadlinePassed()) {
          skipped += session.steps.length - step.turn;
          return;
        }
        const { text: reply } = await send(
          `${session.id}-t${step.turn}`,
          { kind: 'chat', messages: sessionMessages(session, step.turn, replies) },
          step.maxTokens,
        );
        // An empty reply (failed request) keeps the placeholder, so the conversation stays well-formed.
        replies.push(reply === '' ? step.placeholderReply : reply);
      }
    };
    await eachSession(workload.sessions, runSession, options.serial === true);
  } else if (workload.kind === 'agentic') {
    const runAgent = async (session: AgentSession): Promise<void> => {
      await clock.sleep(session.startMs);
      let unsent = agentRequestCount(session);
      const transcript: AgentTurnTranscript[] = [];
      for (const turn of session.turns) {
        const got: { calls: Array<WorkloadToolCall | undefined>; answer?: string } = { calls: [] };
        transcript.push(got);
        for (let round = 0; round <= turn.rounds.length; round++) {
          const request = agentRequest(session, turn.turn, round, transcript);
          if (request.pauseMs > 0) await clock.sleep(request.pauseMs);
          if (deadlinePassed()) {
            skipped += unsent;
            return;
          }
          unsent--;
          const reply = await send(
            request.id,
            { kind: 'chat', messages: request.messages, agent: request.agent },
            request.maxTokens,
            !request.isAnswer,
          );
          // A hole in the transcript is the round's placeholder (agentRequest fills it in).
          if (!request.isAnswer) got.calls[round] = reply.toolCalls[0];
          else if (reply.text !== '') got.answer = reply.text;
        }
      }
    };
    await eachSession(workload.sessions, runAgent, options.serial === true);
  } else {
    const inflight = new Set<Promise<unknown>>();
    let sent = 0;
    for (const event of workload.events) {
      const wait = event.atMs - (clock.now() - start);
      if (wait > 0) await clock.sleep(wait);
      while (inflight.size >= options.maxInflight) await Promise.race(inflight);
      if (deadlinePassed()) {
        skipped = workload.events.length - sent;
        break;
      }
      sent++;
      const pending: Promise<unknown> = send(event.id, eventBody(event), event.maxTokens).finally(() =>
        inflight.delete(pending),
      );
      inflight.add(pending);
    }
    await Promise.all(inflight);
  }
  return { requests, wallMs: clock.now() - start, skipped };
}

/** All sessions at once (closed loop, as clients would), or one after another. */
async function eachSession<S>(
  sessions: readonly S[],
  run: (session: S) => Promise<void>,
  serial: boolean,
): Promise<void> {
  if (!serial) {
    await Promise.all(sessions.map(run));
    return;
  }
  for (const session of sessions) await run(session);
}

/** The request body of an open-loop event, as the driver sends it. */
export function eventBody(event: RequestEvent): SendInput['body'] {
  return event.kind === 'chat'
    ? { kind: 'chat', messages: event.messages, agent: event.agent }
    : { kind: 'completion', prompt: event.prompt };
}
