/**
 * What `kubeboot node replace|revoke|unrevoke|list` asks the cluster: the
 * NodeReplacement and NodeRevocation records (agent/records/kinds.ts), each
 * made or deleted whole, so the API server's creationTimestamp is the time
 * of the mark; the node's CSRs (the pending ones of every signer denied on
 * revoke); the Nodes; whether kube-controller-manager still approves kubelet
 * client CSRs (approver/kcm-bindings.ts). What to make of the answers
 * is agent/admin/node.ts's.
 */
import { kcmAutoApproval, kcmAutoApprovalProblem } from '../approver/kcm-bindings.js';
import { ExitCode, KubebootError } from '../errors.js';
import { KUBELET_CLIENT_SIGNER } from '../identity.js';
import type { KubeClient } from '../kube/client.js';
import { listPages } from '../kube/list.js';
import type { CertificateSigningRequest } from '../kube/csr-state.js';
import { replacementOf, revocationOf, type Replacement, type Revocation } from '../records/bindings.js';
import { INVENTORY_NAME, newRecord, recordRef } from '../records/kinds.js';
import { legacyEntries, LEGACY_CONFIGMAPS, LEGACY_REVOCATIONS, MIGRATE_COMMAND } from '../records/legacy.js';
import { createRecord, deleteRecord, listRecords, readRecord } from '../records/requests.js';
import { expectObject, objectPath } from '../kube/objects.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { parseCsrPem } from '../pki/pkcs10.js';
import { excerpt, terminalLines, type Streams } from '../text.js';
import { newestCerts, nodeRows, NODE_USER, revocationAction, revokedCondition, type IssuedCert } from './node.js';
import { rfc3339 } from './token.js';

const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const NODES = '/api/v1/nodes';

/**
 * `node replace`: a new mark (a mark given again starts over: the old one is
 * deleted, so its time is the API server's now), for `tokenId` or, without
 * one, for the next token `kubeboot token create --node` makes for the name.
 * The first CSR for the name from that token claims it; every other is refused.
 */
export async function replaceNode(client: KubeClient, name: string, tokenId: string | null): Promise<string[]> {
  await deleteRecord(client, 'nodereplacements', name).catch((err: unknown) => {
    if (!(err instanceof Error && 'status' in err && err.status === 404)) throw err;
  });
  const mark = newRecord('nodereplacements', name, { spec: { tokenID: tokenId ?? '' } });
  if ((await createRecord(client, 'nodereplacements', mark, 'the replacement mark is one; nothing was written')) === null)
    throw new KubebootError(`${recordRef('nodereplacements', name)} was made again meanwhile; run kubeboot node replace ${name} again`);
  const lines = [
    `node ${name} marked as being replaced (${recordRef('nodereplacements', name)}): the first CSR for ${NODE_USER}${name} from ${tokenId === null ? 'the token bound to it next' : `token ${tokenId}`} claims the mark, every other is refused`,
    tokenId === null
      ? `make that token with: kubeboot token create --node ${name} (or user-data --create-token --node ${name}); it takes the mark`
      : `token ${tokenId} must be bound to ${name} (kubeboot token create --node ${name} made it so)`,
  ];
  const node = await client.request('GET', objectPath(NODES, name), { accept: [404] });
  if (node.status === 404) lines.push(`no Node ${name} exists now`);
  if ((await readRecord(client, 'noderevocations', name)) !== null)
    lines.push(`node ${name} is revoked: the new machine's certificates are refused until: kubeboot node unrevoke ${name}`);
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
  const made = await createRecord(
    client,
    'noderevocations',
    newRecord('noderevocations', name, { spec: { reason: o.reason } }),
    'the revocation is one; nothing was written',
  );
  const lines = [
    made === null
      ? `node ${name} was revoked already (${recordRef('noderevocations', name)}); its reason is left as it was`
      : `node ${name} revoked: kubeboot approver approves no certificate of ${NODE_USER}${name} from now on, kubelet client, kube-proxy or serving (not-revoked)`,
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
  const legacy = await client.request<{ data?: Record<string, string> }>('GET', objectPath(LEGACY_CONFIGMAPS, LEGACY_REVOCATIONS), {
    accept: [404],
  });
  const stillLegacy = legacy.status !== 404 && legacyEntries(legacy.body.data).has(name);
  // Only a 404 means there was none: a refused or failed delete is an error, never "not revoked".
  const deleted = await deleteRecord(client, 'noderevocations', name);
  if (stillLegacy)
    throw new KubebootError(
      `node ${name} is revoked by the ConfigMap kubeboot/revocations of an earlier release${deleted ? ' too' : ''}; move it first: ${MIGRATE_COMMAND}`,
    );
  if (!deleted) throw new KubebootError(`node ${name} is not revoked`, ExitCode.badInput);
  return [`node ${name} is no longer revoked: kubeboot approver may approve its certificates again (kubelet client, kube-proxy, serving)`];
}

export async function listNodes(client: KubeClient) {
  const nodes: string[] = [];
  await listPages<{ metadata?: { name?: string } }>(client, NODES, { kind: 'Node' }, (n) => {
    if (typeof n.metadata?.name === 'string') nodes.push(n.metadata.name);
  });
  const { certs } = await scanCsrs(client, null);
  const revocations = new Map<string, Revocation>();
  for (const r of await listRecords(client, 'noderevocations')) revocations.set(r.metadata.name, revocationOf(r));
  const replacements = new Map<string, Replacement>();
  for (const r of await listRecords(client, 'nodereplacements')) replacements.set(r.metadata.name, replacementOf(r));
  const inventory = (await readRecord(client, 'inventories', INVENTORY_NAME))?.spec?.nodes ?? null;
  const enrolments = new Map((await listRecords(client, 'tpmenrolments')).map((r) => [r.metadata.name, r] as const));
  return nodeRows(nodes, certs, revocations, replacements, inventory, enrolments);
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
    {
      kind: 'CertificateSigningRequest',
      ...(node === null ? { query: { fieldSelector: `spec.signerName=${KUBELET_CLIENT_SIGNER}` } } : {}),
    },
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
