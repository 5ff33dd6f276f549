import { Buffer } from 'node:buffer';
import { describe, expect, it } from 'vitest';
import { multipartBoundaryOf, readFormField } from './multipart-form';

const limits = { maxParts: 16, maxValueBytes: 256 };

async function formBytes(fields: Record<string, string | Blob>): Promise<{ body: Buffer; contentType: string }> {
  const form = new FormData();
  for (const [key, value] of Object.entries(fields)) form.append(key, value);
  const request = new Request('http://x/', { method: 'POST', body: form });
  return { body: Buffer.from(await request.arrayBuffer()), contentType: request.headers.get('content-type') ?? '' };
}

describe('readFormField', () => {
  it("finds the model field after a file part full of boundary-like bytes (as undici's FormData writes it)", async () => {
    const audio = new Blob([Buffer.concat([Buffer.from('RIFF'), Buffer.alloc(100_000, 0x2d), Buffer.from('\r\n-')])], {
      type: 'audio/wav',
    });
    const { body, contentType } = await formBytes({ file: audio, model: 'whisper-1', language: 'en' });
    const boundary = multipartBoundaryOf(contentType);
    expect(boundary).not.toBeNull();
    expect(readFormField(body, boundary as string, 'model', limits)).toEqual({ kind: 'found', value: 'whisper-1' });
    expect(readFormField(body, boundary as string, 'prompt', limits)).toEqual({ kind: 'absent' });
  });

  it('says malformed for a body without the boundary, an unclosed part, too many parts, an oversized value', async () => {
    expect(readFormField(Buffer.from('{"model":"x"}'), 'abc', 'model', limits).kind).toBe('malformed');
    expect(
      readFormField(
        Buffer.from('--abc\r\nContent-Disposition: form-data; name="model"\r\n\r\nx'),
        'abc',
        'model',
        limits,
      ).kind,
    ).toBe('malformed');
    const many = await formBytes(Object.fromEntries(Array.from({ length: 20 }, (_, index) => [`f${index}`, 'v'])));
    expect(readFormField(many.body, multipartBoundaryOf(many.contentType) as string, 'model', limits)).toEqual({
      kind: 'malformed',
      reason: 'the form has more than 16 parts',
    });
    const long = await formBytes({ model: 'm'.repeat(300) });
    expect(readFormField(long.body, multipartBoundaryOf(long.contentType) as string, 'model', limits).kind).toBe(
      'malformed',
    );
  });

  it('reads boundaries quoted or not, and refuses other content types', () => {
    expect(multipartBoundaryOf('multipart/form-data; boundary="a b"')).toBe('a b');
    expect(multipartBoundaryOf('multipart/form-data; charset=utf-8; boundary=----x1')).toBe('----x1');
    expect(multipartBoundaryOf('application/json')).toBeNull();
    expect(multipartBoundaryOf('multipart/form-data')).toBeNull();
  });
});
