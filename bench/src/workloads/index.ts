export * from './events';
export * from './text';
export * from './sessions';
export * from './agentic';
export * from './poisson';
export * from './traces';
export * from './read';
