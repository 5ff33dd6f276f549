/** The workload layer's only file I/O: trace files in, JSONL traces in and out. */
import { readFile, writeFile } from 'node:fs/promises';
import type { RequestEvent } from './events';
import { eventsFromJsonl, eventsToJsonl } from './events';
import type { TraceOptions } from './traces';
import { parseAzure, parseMooncake } from './traces';

export async function readMooncakeFile(path: string, options: TraceOptions = {}): Promise<RequestEvent[]> {
  return parseMooncake(await readFile(path, 'utf8'), options);
}

export async function readAzureFile(path: string, options: TraceOptions = {}): Promise<RequestEvent[]> {
  return parseAzure(await readFile(path, 'utf8'), options);
}

export async function readTraceFile(path: string): Promise<RequestEvent[]> {
  return eventsFromJsonl(await readFile(path, 'utf8'));
}

export async function writeTraceFile(path: string, events: readonly RequestEvent[]): Promise<void> {
  await writeFile(path, eventsToJsonl(events));
}
