export * from './cluster-key-slot';
export * from './docker-probe';
export * from './local-redis-server';
export * from './loopback-server';
export * from './process-wide';
export * from './start-redis';
export * from './start-redis-cluster';
export * from './unique-key-prefix';
