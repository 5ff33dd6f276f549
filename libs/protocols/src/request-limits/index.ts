export * from './json-nesting';
export * from './generation-limits';
export * from './validation-issues';
