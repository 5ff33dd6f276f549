// The worker file Piscina starts when running from TypeScript sources (development, tests): Node cannot
// import tokenizer-worker.ts by itself, so this registers tsx's loader in the worker first. A bundled build
// passes its own compiled worker instead (TokenizerPoolOptions.workerFile).
import { register } from 'tsx/esm/api';

register();
const worker = await import('./tokenizer-worker.ts');
export default worker.default;
