import { createVitestConfig } from '../../vitest.shared';

export default createVitestConfig('vllm-sim');
