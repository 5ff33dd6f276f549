export * from './percentile';
export * from './synthetic-prompt';
