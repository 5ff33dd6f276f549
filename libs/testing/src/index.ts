export * from './docker-probe';
export * from './local-redis-server';
export * from './loopback-server';
export * from './start-redis';
export * from './unique-key-prefix';
