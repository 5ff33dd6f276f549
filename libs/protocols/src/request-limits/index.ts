export * from './json-nesting';
export * from './generation-limits';
export * from './validation-issues';
export * from './responses-limits';
