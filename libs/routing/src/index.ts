export * from './types';
export { renderRoutingText, type RenderedRoutingText } from './prefix/routing-text';
export { hashRoutingText, type HashedRoutingText } from './prefix/block-hasher';
export { responsesRoutingBody } from './prefix/responses-routing';
export { buildRoutingRequest, DEFAULT_MAX_ROUTED_BLOCKS, type RoutingRequestOptions } from './prefix/routing-request';
export {
  buildTokenRoutingRequest,
  DEFAULT_BLOCK_SIZE_TOKENS,
  DEFAULT_MAX_ROUTED_TOKEN_BLOCKS,
  type TokenRoutingRequestOptions,
} from './prefix/token-routing-request';
export { buildMessagesRoutingRequest, messagesAsChat } from './prefix/messages-routing';
export { engineFigures, engineLoadReadingAs, engineReportedFreeTokens, engineWaiting } from './state/engine-figures';
export { costRule, RANKED_BACKENDS } from './rules/cost';
export { leastLoadedRule } from './rules/least-loaded';
export { sixBitNumbers } from './rules/six-bit';
export { PREFILL_TOKENS_LUA } from './rules/rules-lua.generated';
export {
  backendRendezvousOrder,
  chooseByBoundedLoadHash,
  chooseWithBoundedLoad,
  loadBound,
  rendezvousOrder,
  type BoundedLoadChoice,
} from './policies/bounded-load-hash';
export {
  checkParam,
  defaultsOf,
  describeRange,
  isChoiceParam,
  resolveParams,
  type ChoiceParamSpec,
  type NumberParamSpec,
  type ParamSpec,
  type ParamsOf,
  type ParamTable,
  type ParamValue,
} from './policies/policy-params';
export { createRoundRobinPolicy, ROUND_ROBIN_PARAMS, type RoundRobinParams } from './policies/round-robin';
export { createRandomPolicy, RANDOM_PARAMS, type RandomParams } from './policies/random';
export {
  createLeastLoadedPolicy,
  explainLeastLoadedOutcome,
  LEAST_LOADED_PARAMS,
  type LeastLoadedParams,
} from './policies/least-loaded';
export { createPrefixAwarePolicy, PREFIX_AWARE_PARAMS, type PrefixAwareParams } from './policies/prefix-aware';
export {
  createKvAwarePolicy,
  DEFAULT_KV_AWARE_PARAMS,
  KV_AWARE_PARAMS,
  kvDemandTokens,
  type KvAwareParams,
} from './policies/kv-aware';
export { createKvRouterPolicy, KV_ROUTER_PARAMS, type KvRouterParams } from './policies/kv-router';
export { createSessionPolicy, SESSION_PARAMS, type SessionParams } from './policies/session';
export { createChwblPolicy, CHWBL_PARAMS, type ChwblParams } from './policies/chwbl';
export {
  CACHE_AWARE_PARAMS,
  createCacheAwarePolicy,
  evaluateCost,
  explainCostOutcome,
  type CacheAwareParams,
} from './policies/cache-aware';
export {
  createPolicy,
  DEFAULT_POLICY_PARAMS,
  isPolicyName,
  POLICIES,
  POLICY_NAMES,
  policyParamsFromSettings,
  policySettingKeys,
  type PolicyDefinition,
  type PolicyDefinitions,
  type PolicyName,
  type PolicyParams,
  type PolicyParamsByName,
  type PolicySettingKey,
  type PolicySettings,
} from './policies/policy-registry';
export type {
  AtomicRouteInput,
  CalibratedParam,
  CalibrationBatch,
  DecideInput,
  DecisionScope,
  DecideResult,
  LearnedCalibration,
  LearnInput,
  LearnReply,
  OwnershipCorrection,
  RoutingSnapshot,
  RoutingStateStore,
} from './state/routing-state';
export { CALIBRATED_PARAMS, CALIBRATION_WINDOW, correctedRetention, mergeCalibration } from './state/routing-state';
export { candidatesOf, decide, explainDecision, MAX_RESERVE_CONFLICTS } from './state/decide';
export {
  DEFAULT_MAX_RETENTION_MS,
  DEFAULT_MIN_EVIDENCE_AGE_MS,
  InMemoryRoutingState,
  type InMemoryRoutingStateOptions,
} from './state/in-memory-routing-state';
export { DEFAULT_BYTES_PER_TOKEN, estimatePrefillTokens, unitsPerToken } from './prefix/prefill-estimate';
export {
  CALIBRATION_BOUNDS,
  calibratedOverrides,
  CalibrationSamples,
  calibrationSamplesOf,
  MIN_CALIBRATION_SAMPLES,
  type ResponseObservation,
} from './feedback/calibration';
export {
  checkPrediction,
  ENGINE_BLOCK_TOKENS,
  PREDICTION_OUTCOMES,
  type Prediction,
  type PredictionCheck,
  type PredictionOutcome,
} from './feedback/prediction-accuracy';
export {
  combineHash53,
  hashString53,
  hashTokenBlock53,
  TOKEN_CHAIN_ROOT,
  tokenBlockExtra,
  weightedRendezvousScore,
} from './hash/hash53';
export {
  InMemoryResponseOwners,
  type InMemoryResponseOwnersOptions,
  type ResponseOwnerStore,
} from './state/response-owners';
