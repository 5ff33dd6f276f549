import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';

export const DEFAULT_DOCKER_HOST = 'unix:///var/run/docker.sock';

export interface DockerProbeOptions {
  /** `tcp://host:port`, `unix:///path` or a bare socket path. Default: env `DOCKER_HOST`, else `/var/run/docker.sock`. */
  dockerHost?: string | undefined;
  /** Whole-probe deadline (connect + answer). Default 500 ms. */
  timeoutMs?: number;
}

type Endpoint = { kind: 'unix'; socketPath: string } | { kind: 'tcp'; host: string; port: number };

/** Parses a Docker host string; `undefined` for forms we cannot probe (npipe, ssh, garbage). */
export function parseDockerHost(dockerHost: string): Endpoint | undefined {
  if (dockerHost.startsWith('/')) return { kind: 'unix', socketPath: dockerHost };
  if (dockerHost.startsWith('unix://')) {
    const socketPath = dockerHost.slice('unix://'.length);
    return socketPath ? { kind: 'unix', socketPath } : undefined;
  }
  if (dockerHost.startsWith('tcp://')) {
    let url: URL;
    try {
      url = new URL(dockerHost);
    } catch {
      return undefined;
    }
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    const port = url.port ? Number(url.port) : 2375;
    return host && Number.isInteger(port) && port > 0 ? { kind: 'tcp', host, port } : undefined;
  }
  return undefined;
}

/** Client TLS material when the environment asks for a TLS-verified engine (`DOCKER_TLS_VERIFY`). */
function tlsOptions(): https.RequestOptions | undefined {
  const verify = process.env['DOCKER_TLS_VERIFY'];
  if (!verify || verify === '0') return undefined;
  const certPath = process.env['DOCKER_CERT_PATH'] ?? `${process.env['HOME'] ?? ''}/.docker`;
  return {
    ca: readFileSync(`${certPath}/ca.pem`),
    cert: readFileSync(`${certPath}/cert.pem`),
    key: readFileSync(`${certPath}/key.pem`),
  };
}

/**
 * True only if a Docker engine answers `GET /_ping` with 200 within the deadline.
 * Never rejects, and never waits longer than `timeoutMs` (a socket that accepts but never answers
 * is cut off by an overall timer, not an idle timer).
 */
export function probeDocker(options: DockerProbeOptions = {}): Promise<boolean> {
  const dockerHost = options.dockerHost ?? process.env['DOCKER_HOST'] ?? DEFAULT_DOCKER_HOST;
  const timeoutMs = options.timeoutMs ?? 500;
  const endpoint = parseDockerHost(dockerHost);
  if (!endpoint) return Promise.resolve(false);

  return new Promise<boolean>((resolve) => {
    let settled = false;
    let request: http.ClientRequest | undefined;
    const finish = (answer: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      request?.destroy();
      resolve(answer);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);

    try {
      const target: http.RequestOptions =
        endpoint.kind === 'unix' ? { socketPath: endpoint.socketPath } : { host: endpoint.host, port: endpoint.port };
      const base: http.RequestOptions = {
        ...target,
        method: 'GET',
        path: '/_ping',
        agent: false,
        headers: { host: 'docker' },
      };
      const tls = endpoint.kind === 'tcp' ? tlsOptions() : undefined;
      const onResponse = (response: http.IncomingMessage): void => {
        response.resume();
        finish(response.statusCode === 200);
      };
      request = tls ? https.request({ ...base, ...tls }, onResponse) : http.request(base, onResponse);
      request.on('error', () => finish(false));
      request.end();
    } catch {
      // Unreadable TLS material or a bad option: treat as "no engine".
      finish(false);
    }
  });
}
