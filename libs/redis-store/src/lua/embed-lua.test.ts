import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SCRIPTS } from '../scripts';
import { constantNameOf, GENERATED_FILE, renderEmbeddedLua } from './embed-lua';

describe('embedded Lua', () => {
  it('scripts.generated.ts matches src/lua/*.lua (else run `npm run embed-lua -w @kvroute/redis-store`)', () => {
    expect(readFileSync(GENERATED_FILE, 'utf8')).toBe(renderEmbeddedLua());
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

  it('inlines the shared lease helpers wherever a script includes them, once', () => {
    for (const script of [SCRIPTS.snapshot, SCRIPTS.route, SCRIPTS.renew, SCRIPTS.release]) {
      expect(script.lua, script.name).not.toContain('--#include');
      expect(script.lua.split('local function purgeExpiredLeases(').length - 1, script.name).toBe(1);
    }
  });
});
