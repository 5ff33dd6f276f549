export * from './summary';
export * from './render';
export * from './svg';
export * from './html';
