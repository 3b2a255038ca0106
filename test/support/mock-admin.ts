// An admin's API client whose requests go to undici's MockAgent, for the
// cluster-admin commands' unit tests: answer each request by method and
// path, and read back the calls made, in order, with their bodies.
import type { Test } from 'tap';
import { MockAgent } from 'undici';
import type { Admin } from '../../agent/admin/connect.js';
import { KubeClient } from '../../agent/kube/client.js';

export const MOCK_SERVER = 'https://api.example:6443';

export interface Call {
  method: string;
  /** Without the query. */
  path: string;
  query: URLSearchParams;
  // biome-ignore lint/suspicious/noExplicitAny: a test reads any field of what the command sent
  body: any;
}

export function mockAdmin(t: Test) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  const calls: Call[] = [];
  const client = new KubeClient({ server: MOCK_SERVER, caPem: null }, { kind: 'anonymous' }, agent);
  t.teardown(() => agent.close());
  const admin: Admin = {
    client,
    kubeconfig: {
      file: '/admin.conf',
      server: MOCK_SERVER,
      caPem: null,
      insecureSkipTlsVerify: false,
      tlsServerName: null,
      auth: { kind: 'bearer-token', token: 'x' },
      tokenFile: null,
    },
  };
  const pool = agent.get(MOCK_SERVER);
  /** Answers one `method path` (or below it: `path/<name>`, `path?<query>`) with `status` and `reply(body)`, recording the call. */
  // biome-ignore lint/suspicious/noExplicitAny: as Call.body
  const on = (method: string, path: string, status: number, reply: (body: any) => unknown = () => ({})) =>
    pool.intercept({ method, path: (p) => p === path || p.startsWith(`${path}?`) || p.startsWith(`${path}/`) }).reply((o) => {
      const body = o.body ? JSON.parse(String(o.body)) : {};
      const [bare = '', query = ''] = o.path.split('?');
      calls.push({ method, path: bare, query: new URLSearchParams(query), body });
      return { statusCode: status, data: JSON.stringify(reply(body)) };
    });
  return { admin, client, calls, on, agent };
}

export const notFound = () => ({ kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404 });
