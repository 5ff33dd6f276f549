import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createCacheAwarePolicy, createLeastLoadedPolicy, type AtomicRule } from '@kvroute/routing';
import { routeScriptOf } from '../route-call';
import { SCRIPTS } from '../scripts';

/** The atomic rules kvroute ships, as their policies carry them. */
const RULES = [createCacheAwarePolicy(), createLeastLoadedPolicy()].map((policy) => policy.atomicRule as AtomicRule);
import { constantNameOf, EMBEDDED_LUA, renderEmbeddedLua } from './embed-lua';

describe('embedded Lua', () => {
  it('each generated module matches its .lua files (else run `npm run embed-lua -w @kvroute/redis-store`)', () => {
    for (const { luaDir, generatedFile, label } of EMBEDDED_LUA) {
      expect(readFileSync(generatedFile, 'utf8'), label).toBe(renderEmbeddedLua(luaDir, label));
    }
  });

  it('names each constant after its file', () => {
    expect(constantNameOf('forget-backend.lua')).toBe('FORGET_BACKEND_LUA');
  });

  it('declares in each script header as many KEYS as the script table passes', () => {
    for (const script of Object.values(SCRIPTS)) {
      const declared = new Set(script.lua.match(/^\s*KEYS\[\d+\]/gm)?.map((line) => line.trim()));
      expect(declared.size, script.name).toBe(script.numberOfKeys);
    }
  });

  it('composes route.lua with each rule: the twin in place of --#rule, 9 KEYS declared, no include left', () => {
    for (const rule of RULES) {
      const script = routeScriptOf(rule);
      expect(script.name).toBe(`route:${rule.name}`);
      expect(script.lua).not.toMatch(/^--#(rule|include)/m);
      expect(script.lua).toContain(rule.lua.trimEnd());
      expect(script.lua.split('local function evaluateRule(').length - 1, script.name).toBe(1);
      expect(new Set(script.lua.match(/^\s*KEYS\[\d+\]/gm)?.map((line) => line.trim())).size).toBe(script.numberOfKeys);
    }
  });

  it('inlines the shared lease helpers wherever a script includes them, once', () => {
    for (const script of [
      SCRIPTS.snapshot,
      SCRIPTS.reserve,
      ...RULES.map(routeScriptOf),
      SCRIPTS.renew,
      SCRIPTS.release,
    ]) {
      expect(script.lua, script.name).not.toContain('--#include');
      expect(script.lua.split('local function purgeExpiredLeases(').length - 1, script.name).toBe(1);
    }
  });
});
