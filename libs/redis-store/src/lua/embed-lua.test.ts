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

  it('copies the lease accounting helpers into every script that uses them unchanged', () => {
    const block = (lua: string, from: string, to: string): string => lua.slice(lua.indexOf(from), lua.indexOf(to));
    const helpers = (lua: string): string => block(lua, '-- Lease accounting,', '\nlocal now');
    const reference = helpers(SCRIPTS.snapshot.lua);
    expect(reference).toContain('local function purgeExpiredLeases(');
    expect(helpers(SCRIPTS.reserve.lua)).toBe(reference);
    expect(helpers(SCRIPTS.renew.lua)).toBe(reference);
    const counting = (lua: string): string => block(lua, '-- Lease accounting,', '\nlocal leaseId').trim();
    expect(counting(SCRIPTS.release.lua)).toBe(block(reference, '', '-- Purges every expired').trim());
  });
});
