// Test support for `kubeboot approver`: its manifests and kubeconfig, Node
// objects, node identities that submit hand-crafted CSRs, and reading the
// decisions back (conditions and Events).
import type { ApproverCsr } from '../../agent/approver/csr-facts.js';
import type { ApproverPolicy } from '../../agent/approver/rules/rule.js';
import { randomBytes, webcrypto } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { x509 } from '../../agent/pki/x509.js';
import type { ControlPlane } from './controlplane.js';
import { expectStatus, kubeClient, type KubeClient } from './http.js';
import { writeKubeconfig } from './kubeconfig.js';
import { applyManifests, manifestsDir, type Manifest } from './manifests.js';
import { startKubeboot, type Running } from './kubeboot.js';
import type { KubeObject } from './admin.js';

export const approverManifests = join(manifestsDir, 'approver');
export const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

/**
 * Applies packaging/manifests/approver/*.yaml, writes a kubeconfig for the
 * user those manifests bind and a config file naming it; returns the config
 * file. The test brings its own approver: the plane's is stopped first, so
 * only the test's takes the Lease.
 */
export async function installApprover(plane: ControlPlane, dir: string): Promise<string> {
  await plane.stopKubeletApprover();
  return writeApproverConfig(plane, dir, () => true);
}

type ApproverPlane = Pick<ControlPlane, 'server' | 'caPem' | 'mintClientCert'>;

async function writeApproverConfig(plane: ApproverPlane, dir: string, keep: (m: Manifest) => boolean): Promise<string> {
  const admin = kubeClient({
    server: plane.server,
    caPem: plane.caPem,
    ...(await plane.mintClientCert({ commonName: 'kubeboot-test-admin', organizations: ['system:masters'] })),
  });
  await applyManifests(admin, approverManifests, keep);
  await admin.close();
  const file = join(dir, 'approver.conf');
  await writeKubeconfig(file, plane.server, { pem: plane.caPem }, await plane.mintClientCert({ commonName: 'kubeboot:approver' }));
  const config = join(dir, 'approver.yaml');
  await writeFile(config, stringify({ approver: { kubeconfig: file } }));
  return config;
}

// The plane's approver grants only what kube-controller-manager's
// auto-approval did: kubelet client certificates. kube-proxy's and serving
// grants stay out, so a test of those approves them as a person would.
const kubeletClientGrantsOnly = (m: Manifest) => !/kubeproxyclient|selfnodeserving/.test(m.metadata.name);

/**
 * The plane's own `kubeboot approver --approve-kubelet-client`, standing where
 * kube-controller-manager's auto-approval stood before the shipped RBAC
 * dropped it. The suite's tokens are made by the test's admin without a
 * kubeboot binding, as `kubeadm token create` makes them, hence the unsafe
 * flag; the identity rules with bound tokens are proven by the tests that
 * bring their own approver (approver-kubelet-client, realnode joins).
 */
export async function startKubeletApprover(plane: ApproverPlane, dir: string): Promise<Running> {
  const config = await writeApproverConfig(plane, dir, kubeletClientGrantsOnly);
  // Kubelet client approval is the binary's default: no flag turns it on.
  const approver = startApprover(config, ['--unsafe-approve-unbound-tokens']);
  try {
    await approver.waitForOutput(/became the leader/, 60_000);
  } catch (err) {
    approver.child.kill('SIGKILL');
    throw err;
  }
  return approver;
}

/** Fast leader election so takeovers fit in a test. */
export const FAST_LEASE = ['--lease-duration', '4s', '--renew-deadline', '3s', '--retry-period', '1s'];

export function startApprover(config: string, extra: string[] = [], env: NodeJS.ProcessEnv = {}): Running {
  return startKubeboot(['approver', '--config', config, '--approver-listen', 'off', ...FAST_LEASE, ...extra], env);
}

export async function createNode(plane: ControlPlane, name: string, addresses: { type: string; address: string }[] = []): Promise<void> {
  expectStatus(
    await plane.admin.request('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name } }),
    `create node ${name}`,
    201,
    409,
  );
  if (addresses.length === 0) return;
  const node = (await plane.admin.request<KubeObject>('GET', `/api/v1/nodes/${name}`)).body;
  node.status = { ...(node.status ?? {}), addresses };
  expectStatus(await plane.admin.request('PUT', `/api/v1/nodes/${name}/status`, node), `node ${name} addresses`, 200);
}

/**
 * Creates the Node `name` as its kubelet would register it: once the kubelet
 * client CSR `requester` made (a token's user) is issued, not before — a Node
 * that exists first is a takeover the approver's no-takeover rule refuses.
 * kube-proxy's CSR is approved only for a registered Node, and a test with no
 * kubelet needs one.
 */
export async function registerNodeOnceCredentialed(plane: ControlPlane, name: string, requester: string): Promise<void> {
  await plane.admin.waitFor(
    `the kubelet CSR of ${requester} issued, to register Node ${name}`,
    async () =>
      (await plane.admin.listCsrs()).some(
        (c) =>
          c.spec?.signerName === 'kubernetes.io/kube-apiserver-client-kubelet' && c.spec?.username === requester && c.status?.certificate,
      ) || undefined,
    300_000,
  );
  await createNode(plane, name);
}

/** Whether the authorizer lets `user` in `groups` create `certificatesigningrequests/<subresource>` (csrapproving's and the approver's question). */
export async function mayCreateCsr(plane: ControlPlane, user: string, groups: readonly string[], subresource: string): Promise<boolean> {
  const res = await plane.admin.request<{ status: { allowed?: boolean } }>('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
    apiVersion: 'authorization.k8s.io/v1',
    kind: 'SubjectAccessReview',
    spec: {
      user,
      groups,
      resourceAttributes: { group: 'certificates.k8s.io', resource: 'certificatesigningrequests', verb: 'create', subresource },
    },
  });
  return expectStatus(res, `SubjectAccessReview ${subresource}`, 201).body.status.allowed === true;
}

/** Waits for the kubelet client CSR `requester` files and approves it as the admin, where no approver runs. */
export async function approveKubeletCsrOf(plane: ControlPlane, requester: string, timeoutMs = 180_000): Promise<void> {
  const csr = await plane.admin.waitFor(
    `the kubelet CSR of ${requester}`,
    async () =>
      (await plane.admin.listCsrs()).find(
        (c) =>
          c.spec?.signerName === 'kubernetes.io/kube-apiserver-client-kubelet' && c.spec?.username === requester && !c.status?.conditions,
      ),
    timeoutMs,
  );
  await plane.admin.approveCsr(csr.metadata.name);
}

/** An API client authenticated as `system:node:<name>` in `system:nodes`, as a kubelet is. */
export async function nodeClient(plane: ControlPlane, name: string): Promise<KubeClient> {
  return kubeClient({
    server: plane.server,
    caPem: plane.caPem,
    ...(await plane.mintClientCert({ commonName: `system:node:${name}`, organizations: ['system:nodes'] })),
  });
}

export interface CraftSpec {
  cn: string;
  o?: string[];
  dns?: string[];
  ips?: string[];
  emails?: string[];
  uris?: string[];
  key?: 'ecdsa-p256' | 'rsa-1024' | 'rsa-2048';
}

export async function craftCsrPem(spec: CraftSpec): Promise<string> {
  const rsa = spec.key?.startsWith('rsa-') === true;
  const algorithm = rsa
    ? { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256', publicExponent: new Uint8Array([1, 0, 1]), modulusLength: Number(spec.key!.slice(4)) }
    : { name: 'ECDSA', namedCurve: 'P-256' };
  const keys = (await webcrypto.subtle.generateKey(algorithm, false, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const names = [
    ...(spec.dns ?? []).map((value) => ({ type: 'dns' as const, value })),
    ...(spec.ips ?? []).map((value) => ({ type: 'ip' as const, value })),
    ...(spec.emails ?? []).map((value) => ({ type: 'email' as const, value })),
    ...(spec.uris ?? []).map((value) => ({ type: 'url' as const, value })),
  ];
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: [...(spec.o ?? []).map((o) => ({ O: [o] })), { CN: [spec.cn] }],
    keys,
    signingAlgorithm: rsa ? { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' } : { name: 'ECDSA', hash: 'SHA-256' },
    extensions: names.length > 0 ? [new x509.SubjectAlternativeNameExtension(names)] : [],
  });
  return csr.toString('pem');
}

/**
 * Requests that the approver's parser and Go's (the API server's and the
 * signer's) could read as two different identities, each reported by the
 * approver as it refuses it. Every one is signed and created as the API
 * server accepts it.
 */
export async function ambiguousCsrPems(): Promise<{ what: string; pem: string; why: RegExp }[]> {
  const keys = (await webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, [
    'sign',
    'verify',
  ])) as webcrypto.CryptoKeyPair;
  const signingAlgorithm = { name: 'ECDSA', hash: 'SHA-256' };
  const make = async (name: x509.JsonName, more: Partial<x509.Pkcs10CertificateRequestCreateParams> = {}) =>
    (await x509.Pkcs10CertificateRequestGenerator.create({ name, keys, signingAlgorithm, ...more })).toString('pem') + '\n';
  const proxy = await make([{ CN: ['system:kube-proxy'] }]);
  const controller = await make([{ CN: ['system:kube-controller-manager'] }]);
  const uriSan = new x509.SubjectAlternativeNameExtension([{ type: 'url', value: 'spiffe://cluster/admin' }]);
  const keyId = await x509.SubjectKeyIdentifierExtension.create(keys.publicKey);
  const extensionRequest = (e: x509.Extension) =>
    new x509.Attribute('1.2.840.113549.1.9.14', [new Uint8Array([0x30, e.rawData.byteLength, ...new Uint8Array(e.rawData)])]);
  return [
    // Go takes the last of several CNs; a library may take the first.
    {
      what: 'two CNs, kube-proxy first',
      pem: await make([{ CN: ['system:kube-proxy'] }, { CN: ['system:kube-controller-manager'] }]),
      why: /2 CNs in its subject/,
    },
    // Go's pem.Decode skips a block whose END line has trailing text and reads the next.
    {
      what: 'a kube-proxy block Go skips, glued to a controller-manager block',
      pem: proxy.replace(/-----END CERTIFICATE REQUEST-----\n$/, '-----END CERTIFICATE REQUEST-----x\n') + controller,
      why: /not exactly one PEM/,
    },
    { what: 'two whole PEM blocks', pem: proxy + controller, why: /not exactly one PEM/ },
    // Go merges every extensionRequest attribute; a library may read the first.
    {
      what: 'a second extensionRequest carrying a URI SAN',
      pem: await make([{ CN: ['system:kube-proxy'] }], { extensions: [keyId], attributes: [extensionRequest(uriSan)] }),
      why: /2 extensionRequest attributes/,
    },
    {
      what: 'an OU in the subject',
      pem: await make([{ CN: ['system:kube-proxy'] }, { OU: ['ops'] }]),
      why: /subject attribute 2\.5\.4\.11/,
    },
    { what: 'a multi-valued RDN', pem: await make([{ CN: ['system:kube-proxy'], O: ['kubeadm:cluster-admins'] }]), why: /multi-valued/ },
  ];
}

export interface SubmitSpec extends CraftSpec {
  signer?: string;
  usages?: string[];
  /**
   * Unset: a day for the kube-apiserver-client and kubelet-serving signers (the
   * approver's short-lived rule requires one of kube-proxy CSRs, as kubeboot's node side sends), none otherwise; null: none.
   */
  expirationSeconds?: number | null;
  /** Name prefix; a random suffix keeps names unique. */
  name?: string;
  /** The whole name, as given (hostile names: long, with newlines or control characters). */
  exactName?: string;
  /** spec.request as this PEM text instead of one crafted from the fields above. */
  pem?: string;
}

export const KUBE_PROXY = {
  cn: 'system:kube-proxy',
  signer: 'kubernetes.io/kube-apiserver-client',
  usages: ['digital signature', 'client auth'],
} as const;

/** Submits a CSR as `client`; returns its name. */
export async function submitCsr(client: Pick<KubeClient, 'request'>, spec: SubmitSpec): Promise<string> {
  const name = spec.exactName ?? `${spec.name ?? 'crafted'}-${randomBytes(4).toString('hex')}`;
  const signer = spec.signer ?? KUBE_PROXY.signer;
  const shortLived = signer === KUBE_PROXY.signer || signer === 'kubernetes.io/kubelet-serving';
  const expirationSeconds = spec.expirationSeconds === undefined ? (shortLived ? 24 * 3600 : null) : spec.expirationSeconds;
  const body = {
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: { name },
    spec: {
      request: Buffer.from(spec.pem ?? (await craftCsrPem(spec))).toString('base64'),
      signerName: signer,
      usages: spec.usages ?? [...KUBE_PROXY.usages],
      ...(expirationSeconds !== null ? { expirationSeconds } : {}),
    },
  };
  expectStatus(await client.request('POST', CSRS, body), `create CSR ${name.slice(0, 64)}`, 201);
  return name;
}

export function approvals(csr: KubeObject | null): KubeObject[] {
  return ((csr?.status?.conditions ?? []) as KubeObject[]).filter((c) => c.type === 'Approved');
}

/** Warning Events the approver wrote on a CSR. */
export async function csrEvents(plane: ControlPlane, name: string): Promise<{ reason: string; message: string }[]> {
  const res = await plane.admin.request<{ items: { reason: string; message: string; source?: { component?: string } }[] }>(
    'GET',
    `/api/v1/namespaces/default/events?fieldSelector=${encodeURIComponent(`involvedObject.name=${name}`)}`,
  );
  return res.body.items.filter((e) => e.source?.component === 'kubeboot-approver');
}

/** A signed PKCS#10 request of about `bytes`, carried in an attribute every parser reads past (unstructuredName). */
export async function bigCsrPem(cn: string, bytes: number): Promise<string> {
  const keys = (await webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, [
    'sign',
    'verify',
  ])) as webcrypto.CryptoKeyPair;
  const value = Buffer.from('x'.repeat(bytes));
  const der = new Uint8Array([0x0c, 0x83, value.length >> 16, (value.length >> 8) & 0xff, value.length & 0xff, ...value]);
  const request = await x509.Pkcs10CertificateRequestGenerator.create({
    name: [{ CN: [cn] }],
    keys,
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
    attributes: [new x509.Attribute('1.2.840.113549.1.9.2', [der])],
  });
  return request.toString('pem');
}

/** A pending kube-proxy client CSR filed by node n1, as the unit tests of the approver's loop feed it. */
export async function kubeProxyCsrOfNode(name: string, uid = `uid-${name}`): Promise<ApproverCsr> {
  return {
    kind: 'CertificateSigningRequest',
    metadata: { name, uid, resourceVersion: '5', creationTimestamp: '2026-12-01T16:00:00Z' },
    spec: {
      request: Buffer.from(await craftCsrPem({ cn: 'system:kube-proxy' })).toString('base64'),
      signerName: 'kubernetes.io/kube-apiserver-client',
      username: 'system:node:n1',
      groups: ['system:nodes', 'system:authenticated'],
      usages: ['digital signature', 'client auth'],
      expirationSeconds: 86_400,
    },
    status: {},
  };
}

/** Kubelet client approval with --inventory and bound tokens only, as a TPM-enrolled fleet runs it (ECDSA P-256 keys). */
export const INVENTORY_KUBELET_CLIENT_POLICY: ApproverPolicy = {
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  maxExpirationSeconds: 86_400,
  keyAlgorithms: ['ecdsa-p256'],
  serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
  kubeletClient: { enabled: true, unboundTokens: false, protectNodes: [] },
  inventory: true,
};

/** The bindings through which kube-controller-manager auto-approves kubelet client CSRs, as the suite's plane grants them. */
export const KCM_BINDINGS = ['kubeboot:node-autoapprove-bootstrap', 'kubeboot:node-autoapprove-certificate-rotation'] as const;

/** Deletes them (already gone is fine): from then on only a kubeboot approver approves kubelet client CSRs. */
export async function dropKcmAutoApproval(plane: Pick<ControlPlane, 'admin'>): Promise<void> {
  for (const name of KCM_BINDINGS)
    expectStatus(await plane.admin.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`), name, 200, 404);
}
