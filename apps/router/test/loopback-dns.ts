import dns2 from 'dns2';

const { Packet } = dns2;

/** A DNS server's zone as a test edits it: records per name (lower case, no final dot). */
export interface TestZone {
  a: Map<string, string[]>;
  aaaa: Map<string, string[]>;
  srv: Map<string, Array<{ target: string; port: number; priority?: number; weight?: number }>>;
}

/**
 * How the server answers: `records` (from the zone; NXDOMAIN for a name with no record of any type,
 * NOERROR without answers for a name that has other types), `servfail` (RCODE 2 to everything),
 * `silent` (no answer at all: the client times out).
 */
export type DnsMode = 'records' | 'servfail' | 'silent';

export interface LoopbackDns {
  /** `127.0.0.1:PORT`, for `setServers` / `discoveryDnsServers`. */
  readonly server: string;
  readonly zone: TestZone;
  mode: DnsMode;
  /** Questions answered so far. */
  readonly queries: number;
  close(): Promise<void>;
}

/** A real DNS server (dns2, UDP) on a free loopback port, answering A, AAAA and SRV from a zone the test edits. */
export async function startLoopbackDns(): Promise<LoopbackDns> {
  const zone: TestZone = { a: new Map(), aaaa: new Map(), srv: new Map() };
  const state = { mode: 'records' as DnsMode, queries: 0 };
  const server = dns2.createServer({
    udp: true,
    handle: (request, send) => {
      state.queries++;
      if (state.mode === 'silent') return;
      const response = Packet.createResponseFromRequest(request);
      const [question] = request.questions;
      if (state.mode === 'servfail' || question === undefined) {
        response.header.rcode = 2;
        send(response);
        return;
      }
      const name = question.name.toLowerCase().replace(/\.$/, '');
      const known = zone.a.has(name) || zone.aaaa.has(name) || zone.srv.has(name);
      if (!known) response.header.rcode = 3;
      // TTL 0: nothing between the resolver and this server keeps an old answer.
      const base = { name: question.name, class: Packet.CLASS.IN, ttl: 0 };
      // dns2 encodes plain records (its typings ask for its Resource class).
      const answer = (record: object): void =>
        void response.answers.push(record as unknown as (typeof response.answers)[number]);
      if (question.type === Packet.TYPE.A)
        for (const address of zone.a.get(name) ?? []) answer({ ...base, type: Packet.TYPE.A, address });
      if (question.type === Packet.TYPE.AAAA)
        for (const address of zone.aaaa.get(name) ?? []) answer({ ...base, type: Packet.TYPE.AAAA, address });
      if (question.type === Packet.TYPE.SRV) {
        for (const record of zone.srv.get(name) ?? [])
          answer({
            ...base,
            type: Packet.TYPE.SRV,
            priority: record.priority ?? 0,
            weight: record.weight ?? 10,
            port: record.port,
            target: record.target,
          });
      }
      send(response);
    },
  });
  await server.listen({ udp: { port: 0, address: '127.0.0.1' } });
  const port = (server.addresses() as { udp: { port: number } }).udp.port;
  return {
    server: `127.0.0.1:${port}`,
    zone,
    get mode() {
      return state.mode;
    },
    set mode(mode: DnsMode) {
      state.mode = mode;
    },
    get queries() {
      return state.queries;
    },
    close: async () => {
      await server.close();
    },
  };
}
