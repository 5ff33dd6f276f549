import { describe, expect, it } from 'vitest';
import { ResponseIdWatch } from './response-id-watch';

function watchAll(chunks: readonly string[]): { ids: string[]; doneAt: number } {
  const ids: string[] = [];
  const watch = new ResponseIdWatch((id) => ids.push(id));
  let doneAt = -1;
  chunks.forEach((chunk, index) => {
    if (watch.feed(Buffer.from(chunk)) && doneAt === -1) doneAt = index;
  });
  return { ids, doneAt };
}

describe('ResponseIdWatch', () => {
  it("finds a JSON body's id, and a stream's in response.created, across chunk boundaries", () => {
    expect(watchAll(['{"id":"resp_abc","object":"response","output":[{"id":"msg_1"}]}'])).toEqual({
      ids: ['resp_abc'],
      doneAt: 0,
    });
    const event =
      'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_0123","object":"response"}}\n\n';
    const pieces = [event.slice(0, 80), event.slice(80, 95), event.slice(95)];
    expect(watchAll(pieces)).toEqual({ ids: ['resp_0123'], doneAt: 2 });
  });

  it('reports once, and no id that could not be a response id', () => {
    expect(watchAll(['{"id":"resp_1"}', '{"id":"resp_2"}']).ids).toEqual(['resp_1']);
    expect(watchAll(['{"id":"resp/../../x"}']).ids).toEqual([]);
    expect(watchAll([`{"id":"${'a'.repeat(129)}"}`]).ids).toEqual([]);
  });

  it('gives up after its head without an id: a hostile or foreign body is never buffered whole', () => {
    const result = watchAll(['{"object":"response","instructions":"', 'x'.repeat(9000), '","id":"resp_late"}']);
    expect(result).toEqual({ ids: [], doneAt: 1 });
  });
});
