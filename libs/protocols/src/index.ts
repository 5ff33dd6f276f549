export * from './openai/chat-completions';
export * from './openai/error-body';
export * from './sse';
export * from './backend-state';
export * from './engine-kinds';
export * from './request-limits';
export * from './stream-output';
export * from './response-usage';
