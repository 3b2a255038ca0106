/**
 * What `kubeboot node replace|revoke|unrevoke|list` asks the cluster: the
 * replacement marks and revocations in `kubeboot` (agent/kube/join-bindings.ts),
 * written over the resourceVersion read; the node's CSRs (the pending ones
 * of every signer denied on revoke); the Nodes; whether kube-controller-
 * manager still approves kubelet client CSRs (approver/kcm-bindings.ts). What to make of the answers
 * is agent/join/node.ts's.
 */
import { kcmAutoApproval, kcmAutoApprovalProblem } from '../approver/kcm-bindings.js';
import { ExitCode, KubebootError, ResponseTooLargeError } from '../errors.js';
import { KUBELET_CLIENT_SIGNER } from '../identity.js';
import { MAX_OBJECT_BYTES, type KubeClient } from '../kube/client.js';
import type { CertificateSigningRequest } from '../kube/csr-state.js';
import {
  BINDINGS_CONFIGMAPS,
  BINDINGS_NAMESPACE,
  parseReplacements,
  parseRevocations,
  REPLACEMENTS,
  REVOCATIONS,
} from '../kube/join-bindings.js';
import { expectObject, objectPath } from '../kube/objects.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { parseCsrPem } from '../pki/pkcs10.js';
import { excerpt, terminalLines, type Streams } from '../text.js';
import { namespaceMissing } from './admin.js';
import { newestCerts, nodeRows, NODE_USER, revocationAction, revokedCondition, type IssuedCert } from './node.js';
import { rfc3339 } from './token.js';

const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const NODES = '/api/v1/nodes';

/** `node replace`: the first bootstrap CSR for the name claims the mark (the approver writes `claimedBy`); a mark given again starts over. */
export async function replaceNode(client: KubeClient, name: string, now: Date): Promise<string[]> {
  await updateEntry(client, REPLACEMENTS, name, JSON.stringify({ at: rfc3339(now), claimedBy: null }), 'the replacement mark lives there');
  const lines = [
    `node ${name} marked as being replaced: the first CSR for ${NODE_USER}${name} from a token bound to it claims the mark, every other is refused`,
    `make that token with: kubeboot token create --node ${name} (or user-data --create-token --node ${name})`,
  ];
  const node = await client.request('GET', objectPath(NODES, name), { accept: [404] });
  if (node.status === 404) lines.push(`no Node ${name} exists now: a token bound to it joins without the mark`);
  const revoked = await readMap(client, REVOCATIONS);
  if (parseRevocations(revoked).has(name))
    lines.push(`node ${name} is revoked: the new machine's renewals are refused until: kubeboot node unrevoke ${name}`);
  return lines;
}

export interface RevokeOptions {
  reason: string;
  deleteNode: boolean;
  now: Date;
  io: Streams;
}

/**
 * `node revoke`: the revocation is recorded first (from then on the approver
 * denies the name), then its pending CSRs are denied, then the Node deleted if asked.
 */
export async function revokeNode(client: KubeClient, name: string, o: RevokeOptions): Promise<string[]> {
  await updateEntry(client, REVOCATIONS, name, JSON.stringify({ at: rfc3339(o.now), reason: o.reason }), 'the revocation lives there');
  const lines = [
    `node ${name} revoked: kubeboot approver approves no certificate of ${NODE_USER}${name} from now on, kubelet client, kube-proxy or serving (not-revoked)`,
  ];
  const { pending, approved, certs } = await scanCsrs(client, name);
  for (const csr of pending) {
    const done = await denyCsr(client, csr, name, o);
    lines.push(
      done
        ? `denied pending CSR ${excerpt(csr.metadata.name)} (reason KubebootRevoked)`
        : `CSR ${excerpt(csr.metadata.name)} was decided meanwhile; left as it is`,
    );
  }
  for (const csr of approved)
    lines.push(`CSR ${excerpt(csr)} was already approved: the certificate it gets stays valid until its notAfter`);
  const newest = newestCerts(certs).get(name);
  lines.push(
    newest !== undefined
      ? `its newest certificate a CSR still shows (${excerpt(newest.csr)}) stays valid until ${rfc3339(newest.notAfter)}: a certificate cannot be recalled, it dies then`
      : 'the expiry of its current certificate is unknown (CSRs are deleted an hour after they are decided): it stays valid until its notAfter',
  );
  if (o.deleteNode) {
    const res = await client.request('DELETE', objectPath(NODES, name), { accept: [404] });
    lines.push(res.status === 404 ? `no Node ${name} to delete` : `Node ${name} deleted`);
  }
  o.io.stderr.write(terminalLines(await autoApprovalWarning(client)));
  return lines;
}

/**
 * Whether kube-controller-manager still approves kubelet client CSRs by
 * itself, which a revocation cannot stop: the authorizer is asked
 * (approver/kcm-bindings.ts). Advisory: a failed look is said, not fatal.
 */
async function autoApprovalWarning(client: KubeClient): Promise<string[]> {
  let problem: string | null;
  try {
    problem = kcmAutoApprovalProblem(await kcmAutoApproval(client));
  } catch (err) {
    return [
      `kubeboot node: warning: could not ask the authorizer whether kube-controller-manager still approves kubelet client CSRs: ${excerpt((err as Error).message)}`,
    ];
  }
  return problem === null
    ? []
    : [`kubeboot node: warning: ${problem}; until then a revoked node renews or re-joins through it (docs/node-identity.md)`];
}

/** Adds the Denied condition through /approval; false when the CSR was decided or deleted meanwhile. */
async function denyCsr(client: KubeClient, first: CertificateSigningRequest, node: string, o: RevokeOptions): Promise<boolean> {
  let csr = first;
  for (let attempt = 0; attempt < 5; attempt++) {
    const path = objectPath(CSRS, csr.metadata.name);
    const body = {
      ...csr,
      status: { ...csr.status, conditions: [...(csr.status?.conditions ?? []), revokedCondition(node, o.reason, o.now)] },
    };
    const res = await client.request('PUT', `${path}/approval`, { body, accept: [404, 409] });
    if (res.status === 404) return false;
    if (res.status !== 409) return true;
    const again = await client.request<CertificateSigningRequest>('GET', path, { accept: [404] });
    if (again.status === 404) return false;
    csr = expectObject<CertificateSigningRequest & { kind: string }>(again.body, 'CertificateSigningRequest', csr.metadata.name);
    if (revocationAction(csr, NODE_USER + node, node) !== 'deny') return false;
  }
  throw new KubebootError(
    `CSR ${excerpt(first.metadata.name)} kept changing while it was being denied; run kubeboot node revoke ${node} again`,
  );
}

export async function unrevokeNode(client: KubeClient, name: string): Promise<string[]> {
  const before = await updateEntry(client, REVOCATIONS, name, undefined, 'the revocations live there');
  if (before === undefined) throw new KubebootError(`node ${name} is not revoked`, ExitCode.badInput);
  return [`node ${name} is no longer revoked: kubeboot approver may renew its kubelet client certificate again`];
}

export async function listNodes(client: KubeClient) {
  const nodes: string[] = [];
  await listPages<{ metadata?: { name?: string } }>(client, NODES, 'NodeList', {}, (n) => {
    if (typeof n.metadata?.name === 'string') nodes.push(n.metadata.name);
  });
  const { certs } = await scanCsrs(client, null);
  const revocations = parseRevocations(await readMap(client, REVOCATIONS));
  const replacements = parseReplacements(await readMap(client, REPLACEMENTS));
  return nodeRows(nodes, certs, revocations, replacements);
}

/**
 * Every issued kubelet client certificate's node and dates, and, for `node`
 * (null: none), its pending CSRs of every signer and the approved ones still
 * waiting for the signer (all CSRs are listed then; for `node list` only the
 * kubelet client ones). A CSR or certificate that does not parse is skipped.
 */
async function scanCsrs(
  client: KubeClient,
  node: string | null,
): Promise<{ pending: CertificateSigningRequest[]; approved: string[]; certs: IssuedCert[] }> {
  const pending: CertificateSigningRequest[] = [];
  const approved: string[] = [];
  const certs: IssuedCert[] = [];
  const csrs: CertificateSigningRequest[] = [];
  await listPages<CertificateSigningRequest>(
    client,
    CSRS,
    'CertificateSigningRequestList',
    node === null ? { fieldSelector: `spec.signerName=${KUBELET_CLIENT_SIGNER}` } : {},
    (csr) => {
      if (typeof csr.metadata?.name === 'string' && typeof csr.spec?.signerName === 'string') csrs.push(csr);
    },
  );
  for (const csr of csrs) {
    const issued = csr.status?.certificate;
    if (issued) {
      if (csr.spec.signerName !== KUBELET_CLIENT_SIGNER) continue;
      const cert = certOf(issued);
      if (cert?.commonName.startsWith(NODE_USER) && (node === null || cert.commonName === NODE_USER + node))
        certs.push({
          node: cert.commonName.slice(NODE_USER.length),
          notBefore: cert.notBefore,
          notAfter: cert.notAfter,
          csr: csr.metadata.name,
          requester: csr.spec.username ?? '',
        });
      continue;
    }
    if (node === null) continue;
    const action = revocationAction(csr, await commonNameOf(csr), node);
    if (action === 'deny') pending.push(csr);
    if (action === 'approved') approved.push(csr.metadata.name);
  }
  return { pending, approved, certs };
}

function certOf(base64: string): { commonName: string; notBefore: Date; notAfter: Date } | null {
  try {
    const [leaf] = parseCertificateChain(Buffer.from(base64, 'base64').toString('utf8'));
    return leaf ? { commonName: leaf.subject.commonName, notBefore: leaf.notBefore, notAfter: leaf.notAfter } : null;
  } catch {
    return null;
  }
}

async function commonNameOf(csr: CertificateSigningRequest): Promise<string | null> {
  try {
    return (await parseCsrPem(Buffer.from(csr.spec.request ?? '', 'base64').toString('utf8'))).subject.commonName;
  } catch {
    return null;
  }
}

const PAGE = 500;
/** A page of CSRs, certificates included, is kilobytes each; big ones get smaller pages, down to one object. */
const PAGE_BYTES = 8 << 20;

/** Hands each item of a list to `each`, page by page (limit/continue), as the approver's informer lists. */
async function listPages<T>(
  client: KubeClient,
  path: string,
  kind: string,
  query: Record<string, string>,
  each: (item: T) => void,
): Promise<void> {
  let limit = PAGE;
  let token: string | undefined;
  for (;;) {
    let page: { items?: T[]; metadata?: { continue?: string } };
    try {
      const res = await client.request('GET', path, {
        query: { ...query, limit, continue: token },
        maxBodyBytes: limit === 1 ? MAX_OBJECT_BYTES : PAGE_BYTES,
        timeoutMs: 60_000,
      });
      page = expectObject<{ kind: string; items?: T[]; metadata?: { name?: string; continue?: string } }>(res.body, kind);
    } catch (err) {
      if (!(err instanceof ResponseTooLargeError) || limit === 1) throw err;
      limit = Math.max(1, Math.floor(limit / 8));
      continue;
    }
    for (const item of Array.isArray(page.items) ? page.items : []) each(item);
    token = page.metadata?.continue || undefined;
    if (token === undefined) return;
    limit = Math.min(PAGE, limit * 2);
  }
}

type ConfigMap = {
  kind?: string;
  metadata: { name: string; resourceVersion?: string; [k: string]: unknown };
  data?: Record<string, string>;
};

/** data of `kubeboot/<name>`; empty when it (or the namespace) does not exist. */
async function readMap(client: KubeClient, name: string): Promise<Record<string, string>> {
  const res = await client.request<ConfigMap>('GET', `${BINDINGS_CONFIGMAPS}/${name}`, { accept: [404] });
  return res.status === 404 ? {} : (expectObject<ConfigMap>(res.body, 'ConfigMap', name).data ?? {});
}

/**
 * Sets data[key] of `kubeboot/<map>` (removes it for undefined), creating
 * the ConfigMap when absent; written over the resourceVersion read, so a
 * concurrent writer (the approver claiming a mark) is never overwritten.
 * Returns the value before.
 */
async function updateEntry(
  client: KubeClient,
  map: string,
  key: string,
  value: string | undefined,
  lives: string,
): Promise<string | undefined> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const got = await client.request<ConfigMap>('GET', `${BINDINGS_CONFIGMAPS}/${map}`, { accept: [404] });
    if (got.status === 404) {
      if (value === undefined) return undefined;
      const made = await client.request('POST', BINDINGS_CONFIGMAPS, {
        body: {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { name: map, namespace: BINDINGS_NAMESPACE, labels: { 'app.kubernetes.io/part-of': 'kubeboot' } },
          data: { [key]: value },
        },
        accept: [404, 409],
      });
      if (made.status === 404) throw namespaceMissing(`${lives}; nothing was written`);
      if (made.status === 409) continue;
      return undefined;
    }
    const cm = expectObject<ConfigMap>(got.body, 'ConfigMap', map);
    const before = cm.data?.[key];
    if (value === undefined && before === undefined) return undefined;
    const data = { ...cm.data };
    if (value === undefined) delete data[key];
    else data[key] = value;
    const put = await client.request('PUT', `${BINDINGS_CONFIGMAPS}/${map}`, { body: { ...cm, data }, accept: [409] });
    if (put.status !== 409) return before;
  }
  throw new KubebootError(`${BINDINGS_NAMESPACE}/${map} kept changing while it was being written; try again`);
}
