import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openAiSchemaChecker } from './openai-spec';
import { startTestSim, type TestSim } from './start-test-sim';

/**
 * The sim's Responses API shapes against OpenAI's own OpenAPI spec (test-data/openai-openapi, a
 * pinned copy): the response object (`Response`), every stream event (`ResponseStreamEvent`) and the
 * 404 error (`ErrorResponse`). ajv 6 reads the spec's schemas as draft-07 (keywords it does not know,
 * such as `discriminator`, are ignored); that checks every required field, type and enum.
 */
const EVENT_SCHEMAS: Record<string, string> = {
  'response.created': 'ResponseCreatedEvent',
  'response.in_progress': 'ResponseInProgressEvent',
  'response.output_item.added': 'ResponseOutputItemAddedEvent',
  'response.content_part.added': 'ResponseContentPartAddedEvent',
  'response.output_text.delta': 'ResponseTextDeltaEvent',
  'response.output_text.done': 'ResponseTextDoneEvent',
  'response.content_part.done': 'ResponseContentPartDoneEvent',
  'response.output_item.done': 'ResponseOutputItemDoneEvent',
  'response.completed': 'ResponseCompletedEvent',
};

describe('vllm-sim Responses API against the OpenAPI spec', () => {
  let sim: TestSim;
  let check: (schema: string, value: unknown) => void;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast', timeScale: 1 });
    check = openAiSchemaChecker();
  });
  afterAll(() => sim.close());

  const post = (body: object): Promise<Response> =>
    fetch(`${sim.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('answers a Response, and a follow-up, GET and DELETE in the spec shape', async () => {
    const request = { model: 'test-model', instructions: 'Be brief.', input: 'hi', max_output_tokens: 16 };
    check('CreateResponse', request);
    const first = (await (await post(request)).json()) as { id: string };
    check('Response', first);
    const second = await (
      await post({ model: 'test-model', previous_response_id: first.id, input: 'more', max_output_tokens: 20 })
    ).json();
    check('Response', second);
    check('Response', await (await fetch(`${sim.url}/v1/responses/${first.id}`)).json());
    const deleted = await fetch(`${sim.url}/v1/responses/${first.id}`, { method: 'DELETE' });
    expect(deleted.status).toBe(200);
  });

  it('streams events each of which is a ResponseStreamEvent', async () => {
    const response = await post({ model: 'test-model', input: 'stream', max_output_tokens: 3, stream: true });
    const text = await response.text();
    const events = text.split('\n\n').filter((block) => block.trim() !== '');
    expect(events.length).toBe(4 + 3 + 4);
    for (const block of events) {
      const name = /^event: (.+)$/m.exec(block)?.[1];
      const data = JSON.parse(/^data: (.+)$/m.exec(block)?.[1] ?? 'null') as { type: string };
      expect(data.type).toBe(name);
      // Its own schema (errors that name the field), then the union the spec says a stream holds.
      check(EVENT_SCHEMAS[data.type] ?? 'missing', data);
      check('ResponseStreamEvent', data);
    }
  });

  it("answers an unknown id with an ErrorResponse, but for vLLM's integer `code`", async () => {
    const response = await post({ model: 'test-model', previous_response_id: 'resp_missing', input: 'x' });
    expect(response.status).toBe(404);
    const body = (await response.json()) as { error: { code: unknown } };
    // vLLM puts the HTTP status in `code` (an integer; the spec says string or null): the one field
    // where the sim follows vLLM rather than the spec.
    expect(body.error.code).toBe(404);
    check('ErrorResponse', { error: { ...body.error, code: null } });
  });
});
