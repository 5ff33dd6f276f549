/** One sample line of the exposition: its series name, labels and value. */
export type Sample = { name: string; labels: Record<string, string>; value: number };

/** Every sample a router's `GET /metrics` shows now (`opsUrl`: its ops listener). */
export async function scrapeAt(opsUrl: string): Promise<Sample[]> {
  const text = await (await fetch(`${opsUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const match = /^([\w:]+)(?:\{(.*)\})? (\S+)$/.exec(line);
      const labels: Record<string, string> = {};
      for (const pair of (match?.[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
        labels[pair[1] as string] = pair[2] as string;
      return { name: match?.[1] ?? '', labels, value: Number(match?.[3]) };
    });
}

/** The sum of series `name` over the samples whose labels include `labels`. */
export const sumWhere = (all: Sample[], name: string, labels: Record<string, string>): number =>
  all
    .filter((row) => row.name === name && Object.entries(labels).every(([key, value]) => row.labels[key] === value))
    .reduce((total, row) => total + row.value, 0);
