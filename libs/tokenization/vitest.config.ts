import { createVitestConfig } from '../../vitest.shared.ts';

export default createVitestConfig('tokenization');
