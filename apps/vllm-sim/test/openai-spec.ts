import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import Ajv from 'ajv';
import { expect } from 'vitest';
import { parse } from 'yaml';

/** OpenAI's OpenAPI spec, vendored in the checkout (test-data/README.md: source commit, license). */
const SPEC_PATH = fileURLToPath(new URL('../../../test-data/openai-openapi/openapi.yaml.gz', import.meta.url));

/**
 * A checker of values against the spec's component schemas (`check('Response', body)`): a mismatch
 * fails the test with the schema's name, its first errors and the value. The spec is read once per call.
 */
export function openAiSchemaChecker(): (schema: string, value: unknown) => void {
  const spec = parse(gunzipSync(readFileSync(SPEC_PATH)).toString('utf8')) as { components: object };
  const ajv = new Ajv({ allErrors: true, unknownFormats: 'ignore', logger: false });
  ajv.addSchema({ $id: 'openai', components: spec.components });
  return (schema, value) => {
    const validate = ajv.getSchema(`openai#/components/schemas/${schema}`);
    if (validate === undefined) throw new Error(`no schema ${schema}`);
    const valid = validate(value);
    expect(valid ? null : { schema, errors: validate.errors?.slice(0, 5), value }).toBeNull();
  };
}
