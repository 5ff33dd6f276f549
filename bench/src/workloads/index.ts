export * from './events';
export * from './text';
export * from './sessions';
export * from './poisson';
export * from './traces';
export * from './read';
