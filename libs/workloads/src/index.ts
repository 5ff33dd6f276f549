export * from './percentile';
export * from './synthetic-prompt';
export * from './seeded-random';
