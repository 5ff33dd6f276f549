import { Buffer } from 'node:buffer';

/**
 * Reads one small text field of a `multipart/form-data` body (RFC 7578) without parsing the rest: the
 * router forwards such bodies (vLLM's `/v1/audio/transcriptions` and `/translations`: an audio file and
 * form fields) as the bytes they came as, and needs only the `model` field to pick the pool.
 *
 * Bounded work: one native `indexOf` scan per part for the next delimiter (a file part's bytes are
 * skipped, never copied or decoded), at most `maxParts` parts, part headers of at most
 * MAX_PART_HEADER_BYTES, and a value of at most `maxValueBytes`. Anything it cannot read as a plain form
 * is `malformed`, which the caller answers with a 400.
 */
export type FormFieldResult =
  | { readonly kind: 'found'; readonly value: string }
  | { readonly kind: 'absent' }
  | { readonly kind: 'malformed'; readonly reason: string };

/** Longest header block of one part (Content-Disposition and Content-Type lines): 8 KiB, far above real clients'. */
const MAX_PART_HEADER_BYTES = 8 * 1024;
const CRLF = Buffer.from('\r\n');
const HEADER_END = Buffer.from('\r\n\r\n');

/** The boundary of a `multipart/form-data` Content-Type (RFC 2046: 1–70 characters, quoted or not); null when there is none. */
export function multipartBoundaryOf(contentType: string | undefined): string | null {
  if (contentType === undefined || !/^\s*multipart\/form-data\s*;/i.test(contentType)) return null;
  const match = /;\s*boundary=(?:"([^"]{1,70})"|([^\s;"]{1,70}))/i.exec(contentType);
  if (match === null) return null;
  return (match[1] ?? match[2]) as string;
}

export function readFormField(
  body: Buffer,
  boundary: string,
  name: string,
  options: { readonly maxParts: number; readonly maxValueBytes: number },
): FormFieldResult {
  const delimiter = Buffer.from(`--${boundary}`);
  // Parts are separated by CRLF + delimiter; the first delimiter may open the body without the CRLF.
  const separator = Buffer.concat([CRLF, delimiter]);
  let at = body.indexOf(delimiter);
  if (at === -1) return { kind: 'malformed', reason: 'the body holds no multipart boundary' };
  at += delimiter.length;
  for (let part = 0; part < options.maxParts; part++) {
    // After a delimiter: `--` ends the form; otherwise CRLF and the part's headers.
    if (body[at] === 0x2d && body[at + 1] === 0x2d) return { kind: 'absent' };
    if (body[at] !== 0x0d || body[at + 1] !== 0x0a)
      return { kind: 'malformed', reason: 'a multipart delimiter is not followed by CRLF' };
    const headersStart = at + 2;
    const headersEnd = body.indexOf(HEADER_END, headersStart);
    if (headersEnd === -1 || headersEnd - headersStart > MAX_PART_HEADER_BYTES)
      return { kind: 'malformed', reason: 'a multipart part has no end of headers within 8 KiB' };
    const contentStart = headersEnd + HEADER_END.length;
    const next = body.indexOf(separator, contentStart);
    if (next === -1) return { kind: 'malformed', reason: 'a multipart part is not closed by a boundary' };
    if (partName(body.toString('latin1', headersStart, headersEnd)) === name) {
      if (next - contentStart > options.maxValueBytes)
        return {
          kind: 'malformed',
          reason: `the form field \`${name}\` is longer than ${options.maxValueBytes} bytes`,
        };
      return { kind: 'found', value: body.toString('utf8', contentStart, next) };
    }
    at = next + separator.length;
  }
  return { kind: 'malformed', reason: `the form has more than ${options.maxParts} parts` };
}

/** The `name` of a part's `Content-Disposition: form-data; name="…"` header (null: none). */
function partName(headers: string): string | null {
  for (const line of headers.split('\r\n')) {
    if (!/^content-disposition\s*:/i.test(line)) continue;
    const match = /;\s*name="([^"]*)"/i.exec(line) ?? /;\s*name=([^\s;]+)/i.exec(line);
    return match === null ? null : (match[1] as string);
  }
  return null;
}
