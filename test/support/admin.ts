// The cluster administrator's side of a test: bootstrap tokens, CSR decisions
// and bounded waits, done over the REST API with the admin client cert.
import { randomInt } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { bindingRecord } from '../../agent/records/bindings.js';
import { recordsPath } from '../../agent/records/kinds.js';
import { expectStatus, type KubeClient, type KubeResponse } from './http.js';

export interface BootstrapToken {
  id: string;
  secret: string;
  /** `<id>.<secret>`, as a bearer token. */
  token: string;
}

export type TokenUsage = 'authentication' | 'signing';

export interface CreateTokenOptions {
  expiration?: Date;
  /** Each must start with `system:bootstrappers:` (the apiserver ignores others). */
  extraGroups?: string[];
  usages?: TokenUsage[];
  /**
   * Bind the token as `kubeboot token create --node/--pool` does (the
   * TokenBinding tokenbindings.kubeboot.io/<id>, naming its Secret's uid);
   * needs kubeboot's CRDs (packaging/manifests/approver/node-identity.yaml).
   */
  bind?: { names: string[] } | { prefix: string; maxNodes: number };
}

// Loose shapes: tests inspect whatever fields they care about.
// biome-ignore lint/suspicious/noExplicitAny: a test reads any field of any object the API returns
export type KubeObject = { metadata: { name: string; [k: string]: unknown }; [k: string]: any };

export interface AdminApi {
  request<T = unknown>(method: string, path: string, body?: unknown): Promise<KubeResponse<T>>;
  createBootstrapToken(opts?: CreateTokenOptions): Promise<BootstrapToken>;
  deleteBootstrapToken(id: string): Promise<void>;
  listCsrs(): Promise<KubeObject[]>;
  getCsr(name: string): Promise<KubeObject | null>;
  approveCsr(name: string, reason?: string): Promise<void>;
  denyCsr(name: string, reason?: string): Promise<void>;
  deleteCsr(name: string): Promise<void>;
  getNode(name: string): Promise<KubeObject | null>;
  /** Polls `probe` until it returns a value; the timeout error names `what`. */
  waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs?: number): Promise<T>;
}

const csrs = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const tokenAlphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';

function randomTokenPart(length: number): string {
  let s = '';
  for (let i = 0; i < length; i++) s += tokenAlphabet[randomInt(tokenAlphabet.length)];
  return s;
}

/** RFC 3339 without fractional seconds, the form kubeadm writes. */
export function rfc3339(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const cause = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${cause}`);
    }
    await delay(250);
  }
}

/**
 * `client` acts as the cluster admin; `asToken` opens a client that
 * authenticates with a bootstrap token (the caller's to close).
 */
export function adminApi(client: KubeClient, asToken: (token: string) => KubeClient): AdminApi {
  const decide = async (name: string, type: 'Approved' | 'Denied', reason: string) => {
    const csr = await api.getCsr(name);
    if (!csr) throw new Error(`CSR ${name} not found`);
    csr.status = csr.status ?? {};
    csr.status.conditions = [
      ...(csr.status.conditions ?? []),
      { type, status: 'True', reason, message: `${type.toLowerCase()} by the kubeboot test suite` },
    ];
    expectStatus(await client.request('PUT', `${csrs}/${name}/approval`, csr), `${type} CSR ${name}`, 200);
  };

  // kube-apiserver authenticates bootstrap tokens from an informer's cache of
  // Secrets, which trails the POST by a moment: a test must never hand out a
  // token the apiserver cannot see yet (kubeboot rightly fails on a 401).
  const untilAuthenticates = async (token: string, id: string) => {
    const asNode = asToken(token);
    const review = { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' };
    try {
      await waitFor(
        `bootstrap token ${id} to authenticate`,
        async () => {
          const res = await asNode.request('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', review);
          return res.status === 201 ? true : undefined;
        },
        30_000,
      );
    } finally {
      await asNode.close();
    }
  };

  const api: AdminApi = {
    request: (method, path, body) => client.request(method, path, body),

    async createBootstrapToken(opts = {}) {
      const id = randomTokenPart(6);
      const secret = randomTokenPart(16);
      const usages = opts.usages ?? ['authentication', 'signing'];
      const stringData: Record<string, string> = { 'token-id': id, 'token-secret': secret };
      for (const u of usages) stringData[`usage-bootstrap-${u}`] = 'true';
      if (opts.expiration) stringData.expiration = rfc3339(opts.expiration);
      if (opts.extraGroups?.length) stringData['auth-extra-groups'] = opts.extraGroups.join(',');
      const secretObject = {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: `bootstrap-token-${id}`, namespace: 'kube-system' },
        type: 'bootstrap.kubernetes.io/token',
        stringData,
      };
      const made = expectStatus(
        await client.request<{ metadata: { uid: string } }>('POST', '/api/v1/namespaces/kube-system/secrets', secretObject),
        `create bootstrap token ${id}`,
        201,
      );
      if (opts.bind)
        expectStatus(
          await client.request('POST', recordsPath('tokenbindings'), bindingRecord(id, opts.bind, made.body.metadata.uid)),
          `bind bootstrap token ${id}`,
          201,
        );
      const token = `${id}.${secret}`;
      const expired = opts.expiration !== undefined && opts.expiration.getTime() <= Date.now();
      if (usages.includes('authentication') && !expired) await untilAuthenticates(token, id);
      return { id, secret, token };
    },

    async deleteBootstrapToken(id) {
      const res = await client.request('DELETE', `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`);
      expectStatus(res, `delete bootstrap token ${id}`, 200, 404);
    },

    async listCsrs() {
      const res = expectStatus(await client.request<{ items: KubeObject[] }>('GET', csrs), 'list CSRs', 200);
      return res.body.items;
    },

    async getCsr(name) {
      const res = expectStatus(await client.request<KubeObject>('GET', `${csrs}/${name}`), `get CSR ${name}`, 200, 404);
      return res.status === 404 ? null : res.body;
    },

    approveCsr: (name, reason = 'KubebootTestApprove') => decide(name, 'Approved', reason),
    denyCsr: (name, reason = 'KubebootTestDeny') => decide(name, 'Denied', reason),

    async deleteCsr(name) {
      expectStatus(await client.request('DELETE', `${csrs}/${name}`), `delete CSR ${name}`, 200, 404);
    },

    async getNode(name) {
      const res = expectStatus(await client.request<KubeObject>('GET', `/api/v1/nodes/${name}`), `get node ${name}`, 200, 404);
      return res.status === 404 ? null : res.body;
    },

    waitFor,
  };
  return api;
}
