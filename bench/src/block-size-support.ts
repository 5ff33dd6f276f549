export { buildRoutingRequest, createPolicy, InMemoryRoutingState } from '@kvroute/routing';
export interface ChatMessageLike {
  role: 'system' | 'user' | 'assistant';
  content: string;
}
