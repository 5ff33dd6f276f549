/**
 * The vocabulary of routing decisions. Pure data: no I/O, no clocks, no randomness (those arrive
 * through PolicyContext), so every policy is testable without sleeping.
 *
 * Words: a *backend* is where requests go; a *pool* is the backends serving one model; a *prefix
 * block* is a fixed-size byte block of the routing text, identified by its chained *block hash*;
 * *match* is how many leading blocks of a request a backend is believed to hold; *in-flight* is the
 * number of requests the router fleet currently has outstanding on a backend.
 */

/** Stable backend identifier (default: the URL's `host:port`); what `X-Router-Backend` shows. */
export type BackendId = string;

/**
 * Chained block hash: block i's hash covers blocks 0..i, so holding block i implies holding all
 * shallower ones. A 53-bit integer (a plain JS number: cheap Map key, exact in JSON).
 */
export type BlockHash = number;

export interface BackendInfo {
  readonly id: BackendId;
  /** Relative capacity (default 1): bounded-load rules and hashing give a backend `weight` shares. */
  readonly weight: number;
}

/** One backend as a policy sees it at decision time. */
export interface Candidate {
  readonly backend: BackendInfo;
  /** Requests in flight on this backend (fleet-wide once state is shared). */
  readonly inflight: number;
  /** Leading prefix blocks of this request the backend is believed to hold (0 … request.blockHashes.length). */
  readonly matchBlocks: number;
  /**
   * When the backend's deepest matched block (block `matchBlocks`) was recorded, ms on the state
   * store's clock, as read before this decision recorded anything. Times never increase along a
   * chain, so it is the oldest entry of the matched prefix: the one an LRU engine evicts first, whose
   * age the learn stage takes as eviction evidence. Absent or null when `matchBlocks` is 0 or the
   * store did not read depths.
   */
  readonly matchRecordedAtMs?: number | null;
  /**
   * Estimated prompt tokens the fleet has sent this backend that have not produced a first token yet:
   * its prefill backlog, which a new request waits behind. (In-flight alone cannot tell a queue of
   * 8k-token prefills from a batch of decoding streams.)
   */
  readonly pendingPrefillTokens: number;
  /**
   * What the engine itself last reported (health poller, through Redis), when it is fresh enough to
   * trust; absent or null = unknown (never read as idle).
   */
  readonly engine?: EngineLoad | null;
}

/** An engine's own view of its load, as the health poller scraped it from its /metrics. */
export interface EngineLoad {
  /** KV-cache usage, 0 (empty) … 1 (full); null when the engine does not report it (llama.cpp's newer metrics). */
  readonly kvUsage: number | null;
  /** KV-cache capacity in tokens; null when the engine does not report it. */
  readonly kvCapacityTokens: number | null;
  /** Requests the engine is running (decoding or prefilling). */
  readonly running: number;
  /** Requests queued in the engine, not yet scheduled. */
  readonly waiting: number;
}

/** An engine's load as the two integers the atomic rules read (state/engine-figures.ts `engineFigures`). */
export interface EngineFigures {
  /** Requests waiting in the engine's queue (engineWaiting). */
  readonly waiting: number;
  /** Free KV tokens as reported (engineReportedFreeTokens): -1 = no limit known. */
  readonly freeTokens: number;
}

/** What a policy knows about a request. */
export interface RoutingRequest {
  readonly model: string;
  /** Chained hashes of the routing text's full blocks, in order (may be empty for tiny prompts). */
  readonly blockHashes: readonly BlockHash[];
  /** Block size in bytes that produced `blockHashes` (in tokens when `unit` is 'tokens'). */
  readonly blockSizeBytes: number;
  /** Routing text length in bytes (≈ 4 bytes per token for English); the prompt's tokens when `unit` is 'tokens'. */
  readonly textBytes: number;
  /**
   * What `textBytes` and `blockSizeBytes` count: bytes of the routing text (byte mode, the default when
   * absent), or the prompt's tokens as the engine tokenizes it (token mode: buildTokenRoutingRequest),
   * where a token is a token and no bytes-per-token ratio applies.
   */
  readonly unit?: 'bytes' | 'tokens';
  /**
   * Leading full blocks that cover everything before the last message (chat) — the part a previous
   * turn of the same conversation already sent. 0 for completions and single-message chats.
   */
  readonly contextBlocks: number;
  /** Hash identifying the request's start (first block, or the whole text when shorter), for cold placement. */
  readonly headHash: BlockHash;
  /**
   * Where the first turn (the first message that is not `system` or `developer`) starts and ends in the
   * routing text, UTF-8 byte offsets: every later turn of the conversation has the same text up to
   * its end. Absent for completions and chats without one. A turn past the routed part of a huge
   * prompt (maxRoutedBlocks) is reported at the cut: beyond every block, where the key is the last one.
   */
  readonly firstTurnBytes?: { readonly start: number; readonly end: number } | undefined;
  /**
   * 1-based positions of the blocks on either side of some message boundaries (a chat's first message's end
   * and its last few: where a system prompt, or an earlier turn of the same conversation, ended), ascending:
   * where backends' matches most likely stop. A hint for a state store's depth search (read first; the Redis
   * store's bisection then rarely needs a round), never a result: absent or wrong, the depths and a big pool's
   * shortlist are the same.
   */
  readonly boundaryBlocks?: readonly number[];
  /** Affinity key from `X-Session-Id`, the body's `prompt_cache_key` or its `user` (that order), when given. */
  readonly sessionKey: string | null;
  /** The body's `max_completion_tokens` or `max_tokens` × `n`, when given: the most tokens it may generate. */
  readonly maxTokens?: number | null;
  /**
   * A LoRA adapter's request: the wait its adapter adds on each backend, ms (0 where it is running; a load into a free
   * slot, or a wait for a slot, elsewhere: apps/router lora/adapter-wait.ts). Absent, null or a backend not in it: 0.
   * cacheaware prices it like any other wait (`adapterMs`).
   */
  readonly adapterWaitMs?: ReadonlyMap<BackendId, number> | null;
}

/** Why a backend was chosen; sent as `X-Router-Reason`. Lower-case, hyphenated, stable. */
export type DecisionReason =
  | 'round-robin'
  | 'random'
  | 'least-loaded'
  | 'longest-prefix'
  | 'spilled-from-saturated'
  | 'spilled-fallback-leastloaded'
  | 'fallback-leastloaded'
  | 'cache-hit'
  | 'cache-miss'
  | 'session-affinity'
  | 'session-spilled'
  | 'consistent-hash'
  | 'consistent-hash-spilled'
  | 'prefix-affinity'
  | 'load-guard'
  | 'cold-hash'
  | 'kv-fit'
  | 'kv-unknown'
  | 'kv-pressure'
  | 'only-backend'
  /** A Responses request sent to the backend that stored the response it continues (`previous_response_id`). */
  | 'previous-response'
  /** That backend is known but not eligible now (removed, drained, failing, already tried): routed by the policy instead. */
  | 'previous-response-fallback';

/** Per-candidate figures behind a decision, for `/debug/route` and debug logs. */
export interface CandidateScore {
  readonly backendId: BackendId;
  readonly matchBlocks: number;
  readonly inflight: number;
  /** The policy's score; its direction and range are documented by each policy (`scoreDirection`). */
  readonly score: number;
  /** Policy-specific parts of the score (e.g. `{ prefillMs, queueMs }`). */
  readonly parts?: Readonly<Record<string, number>>;
  /** Why this candidate was excluded, if it was. */
  readonly excluded?: string;
}

export type RoutingDecision =
  | {
      readonly kind: 'routed';
      readonly backendId: BackendId;
      readonly reason: DecisionReason;
      readonly scores: readonly CandidateScore[];
      /**
       * The in-flight count the policy relied on staying below when it chose (its saturation valve).
       * The state store enforces it atomically when it takes the lease, so a burst routed by many
       * replicas at once cannot overfill a backend; on a conflict the caller decides again.
       * Absent when the choice does not depend on a cap (e.g. "everyone is saturated, least-loaded").
       */
      readonly inflightCap?: number;
    }
  | { readonly kind: 'rejected'; readonly reason: 'no-eligible-backend' };

/** The reasons of cacheaware's cost rule (see policies/cache-aware.ts). */
export type CostReason = 'prefix-affinity' | 'spilled-from-saturated' | 'least-loaded' | 'load-guard' | 'cold-hash';

/** One candidate's line in the cost rule's outcome: its cost terms in ms (see policies/cache-aware.ts). */
export interface CostLine {
  readonly prefillMs: number;
  readonly backlogMs: number;
  readonly queueMs: number;
  readonly waitingMs: number;
  readonly kvMs: number;
  /** The wait the request's LoRA adapter adds on this backend (RoutingRequest.adapterWaitMs); 0 for other requests. */
  readonly adapterMs: number;
  /**
   * prefillMs + workMs + queueMs + max(backlogMs, waitingMs) + kvMs + adapterMs, summed in that order, where
   * workMs = prefillMs · prefillWorkWeight (not carried: the explanation derives it from the parameters).
   */
  readonly totalMs: number;
  /** Why the rule left it out before choosing, if it did. */
  readonly excluded?: 'saturated' | 'load-spread';
  /**
   * Present when the rule placed a cold prompt by bounded-load hashing and this candidate took part:
   * its rank in the head hash's rendezvous order among those that took part (0 = first preference),
   * and its load bound (it may take the request while in-flight ≤ bound).
   */
  readonly cold?: { readonly hashRank: number; readonly bound: number };
}

/**
 * What evaluating an atomic rule produced, whoever evaluated it (the policy's TypeScript, or a state
 * store next to its state): the figures it read, its choice and its reasons. The policy turns an
 * outcome into its RoutingDecision (`AtomicRule.explain`), so a decision reads the same whichever
 * side evaluated the rule. Every rule's outcome has these two fields; the rest is the rule's own.
 */
export interface AtomicOutcomeBase {
  /** The figures the rule read, in the order of the candidates it was given. */
  readonly candidates: readonly Candidate[];
  /** Index of the chosen candidate; -1 = none (never with candidates). */
  readonly chosen: number;
}

/** The least-loaded rule's outcome (rules/least-loaded.ts). */
export interface LeastLoadedOutcome extends AtomicOutcomeBase {
  readonly kind: 'least-loaded';
  readonly reason: 'least-loaded';
}

/** The cost rule's outcome (rules/cost.ts). */
export interface CostOutcome extends AtomicOutcomeBase {
  readonly kind: 'cost';
  readonly reason: CostReason;
  /** The saturation valve would have excluded every candidate, so it was lifted (no in-flight cap is promised). */
  readonly valveLifted: boolean;
  /** One line per candidate, in order. */
  readonly lines: readonly CostLine[];
}

/** The outcomes of the rules kvroute ships. */
export type AtomicOutcome = LeastLoadedOutcome | CostOutcome;

/** A rule's own part of one evaluation by a state store (`AtomicRule.encode`). */
export interface AtomicRuleCall {
  /** The argument of the rule's Lua twin: its parameters and the request's figures it reads, one string. */
  readonly argument: string;
  /**
   * Backends the rule wants among the participants when a big pool decides over a shortlist, as
   * indices into the backends given, most wanted first (the cost rule: the first of the rendezvous order).
   */
  readonly preferred: readonly number[];
}

/** What a state store's evaluation returned for the rule (`AtomicRule.decode`). */
export interface AtomicRuleReply {
  /** The backends that took part (a big pool: the shortlist), in configuration order, with the figures read. */
  readonly candidates: readonly Candidate[];
  /** Index of the chosen one in `candidates`. */
  readonly chosen: number;
  /** The values the Lua twin returned as its detail, in order (bulk strings as bytes). */
  readonly detail: readonly Buffer[];
  /** The request the rule was evaluated for. */
  readonly request: RoutingRequest;
  /** Per candidate, the engine figures the evaluation read (the store's, which may be fresher than `candidates`' own). */
  readonly engineFigures: readonly EngineFigures[];
}

/**
 * A policy's choice as a rule a state store can evaluate itself, next to its state (the Redis store:
 * in Lua, inside route.lua), so that reading the figures, choosing, taking the lease and recording
 * ownership are one atomic step. The rule owns both halves of that call: its Lua twin (`lua`, the
 * file of the same base name under rules/) and the codec of its argument and detail. A store must
 * choose exactly what the policy's `choose` chooses on the same figures, and the decision built from its
 * reply must be `choose`'s (libs/redis-store's rule-parity test checks both on random cases): `decode`
 * builds the outcome (a codec may recompute what its twin need not return, from the figures the reply
 * carries: the cost rule's lines), `explain` turns it into the decision, and the choice is never made
 * twice. The store knows no rule by name.
 */
export interface AtomicRule<Outcome extends AtomicOutcomeBase = AtomicOutcomeBase> {
  /** The rule's name: its files' base name (rules/<name>.ts, rules/<name>.lua) and its script's suffix. */
  readonly name: string;
  /** The Lua twin's source: defines `evaluateRule(candidates, argument)` (contract: rules/README.md). */
  readonly lua: string;
  /** The rule reads match depths, so the store searches the owner index for every participant. */
  readonly readsDepths: boolean;
  /** This decision's argument for the Lua twin, over `backends` (the eligible ones, configuration order). */
  encode(request: RoutingRequest, backends: readonly BackendInfo[]): AtomicRuleCall;
  /** The outcome of a store's evaluation, from the Lua twin's detail. */
  decode(reply: AtomicRuleReply): Outcome;
  /** The policy's decision of an outcome (the same whichever side evaluated the rule). */
  explain(outcome: Outcome): RoutingDecision;
}

/** Clock and randomness come from here, never from globals. */
export interface PolicyContext {
  readonly nowMs: number;
  /** Uniform in [0, 1). */
  readonly random: () => number;
}

/**
 * Chooses one backend for a request among eligible candidates (healthy, breaker closed, serving the
 * model); candidates are never empty. Pure apart from the policy's own small state (e.g. a
 * round-robin counter), which lives in the instance: one instance per pool.
 */
export interface RoutingPolicy {
  readonly name: string;
  /** "higher is better" or "lower is better", and the range, of `CandidateScore.score`. */
  readonly scoreDirection: string;
  /** True when the policy reads `matchBlocks` (the caller can skip the prefix lookup otherwise). */
  readonly usesPrefixMatch: boolean;
  /**
   * When the chosen backend starts to count as holding the request's prefix blocks (read only when
   * `usesPrefixMatch`, and only by `decide` in state/decide.ts, which records accordingly):
   * - `at-routing`: recorded with the lease, speculatively, so a burst of siblings follows the first
   *   request (the seed routers' behaviour);
   * - `at-first-output`: recorded when the request's first output token arrives
   *   (`RoutingStateStore.prefillDone` with `DecideResult.blocksAtFirstOutput`), which is when the
   *   engine has computed the prefix: a sibling routed there before that would compute it again
   *   anyway, and queue behind the first, so until then siblings are placed by load like any cold prompt.
   */
  readonly recordsOwnership: 'at-routing' | 'at-first-output';
  /**
   * The policy's choice as a rule a state store can evaluate next to its state (see AtomicRule).
   * Absent: the store snapshots, `choose` decides, and the lease is taken conditionally (`decide`).
   */
  readonly atomicRule?: AtomicRule;
  choose(request: RoutingRequest, candidates: readonly Candidate[], context: PolicyContext): RoutingDecision;
}
