import { z } from 'zod';
import { isAddressOrCidr } from './proxy-protocol';

/**
 * Client connections' options (issue 30): where client addresses come from behind a balancer
 * (http/proxy-protocol.ts) and how many connections one client may hold (pipeline/connection-caps.ts).
 * Spread into the router's config schema.
 */
export const CONNECTION_CONFIG_FIELDS = {
  proxyProtocolFrom: z
    .array(z.string().min(1).refine(isAddressOrCidr, { message: 'an IP address or CIDR (10.0.0.0/8, fd00::/8)' }))
    .default([])
    .describe(
      'addresses or CIDRs of the L4 balancers in front (e.g. 10.0.0.0/8): a connection from one must start ' +
        'with a PROXY protocol v1/v2 header (else it is closed), and the client it names is the request’s ' +
        'client address; connections from other addresses are served as they are. Empty = PROXY protocol off',
    ),
  proxyProtocolTimeoutMs: z.coerce
    .number()
    .int()
    .positive()
    .default(3_000)
    .describe('a balancer connection’s PROXY header must have arrived within this long, else the connection is closed'),
  maxConnectionsPerPeer: z.coerce
    .number()
    .int()
    .min(0)
    .default(0)
    .describe(
      'client connections one client address (the real client behind a PROXY-protocol balancer) may hold ' +
        'open at once; at this cap or maxConnections, its (or anybody’s) oldest idle keep-alive connection is ' +
        'closed to make room, and only when none is idle is a request refused (429 for this cap). 0 = a ' +
        'quarter of maxConnections, so no client alone fills the router',
    ),
};
