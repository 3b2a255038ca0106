// The test control plane behaves like a kubeadm cluster for everything
// kubeboot relies on: bootstrap tokens authenticate, node client CSRs are
// approved (by the plane's `kubeboot approver`, not by kube-controller-manager:
// the shipped RBAC grants it no auto-approval) and signed by the cluster CA,
// expired tokens are refused and cluster-info is signed per token. Proven with plain HTTPS and kubectl only,
// so a failure here is the harness's or the cluster's, never kubeboot's.
import t from 'tap';
import { createHmac } from 'node:crypto';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { x509 } from '../../agent/pki/x509.js';
import { mayCreateCsr } from '../support/approver.js';
import { controlPlaneOrSkip, type ControlPlane } from '../support/controlplane.js';
import { expectStatus, kubeClient } from '../support/http.js';
import { ecdsaP256, privateKeyPem, subjectName } from '../support/pki.js';

const run = promisify(execFile);

interface SelfSubjectReview {
  status: { userInfo: { username: string; groups?: string[] } };
}

const selfSubjectReview = { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' };
const selfSubjectReviews = '/apis/authentication.k8s.io/v1/selfsubjectreviews';
const csrs = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

async function whoAmI(cp: ControlPlane, auth: { token: string } | { certPem: string; keyPem: string }) {
  const client = kubeClient({ server: cp.server, caPem: cp.caPem, ...auth });
  try {
    return await client.request<SelfSubjectReview>('POST', selfSubjectReviews, selfSubjectReview);
  } finally {
    await client.close();
  }
}

/** Submits a kubelet client CSR as `auth` and waits for it to be approved and signed. */
async function submitNodeCsr(cp: ControlPlane, auth: { token: string } | { certPem: string; keyPem: string }, commonName: string) {
  const keys = await crypto.subtle.generateKey(ecdsaP256, true, ['sign', 'verify']);
  const request = await x509.Pkcs10CertificateRequestGenerator.create({
    name: subjectName({ commonName, organizations: ['system:nodes'] }),
    keys,
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
  });
  const client = kubeClient({ server: cp.server, caPem: cp.caPem, ...auth });
  let name: string;
  try {
    const created = await client.request<{ metadata: { name: string } }>('POST', csrs, {
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { generateName: 'node-csr-' },
      spec: {
        request: Buffer.from(request.toString('pem')).toString('base64'),
        signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
        usages: ['digital signature', 'client auth'],
      },
    });
    name = expectStatus(created, `create CSR for ${commonName}`, 201).body.metadata.name;
  } finally {
    await client.close();
  }
  const csr = await cp.admin.waitFor(`CSR ${name} to be approved and signed`, async () => {
    const c = await cp.admin.getCsr(name);
    return c?.status?.certificate ? c : undefined;
  });
  const cert = new x509.X509Certificate(Buffer.from(csr.status.certificate, 'base64').toString());
  return { csr, cert, keys };
}

const cp = await controlPlaneOrSkip(t, { name: 'e2e' });
if (cp) {
  t.comment(`control plane ${cp.version} ready in ${cp.startupMs} ms at ${cp.server}`);

  t.test('a bootstrap token authenticates as system:bootstrap:<id> in system:bootstrappers', async (t) => {
    const token = await cp.admin.createBootstrapToken();
    const res = expectStatus(await whoAmI(cp, { token: token.token }), 'SelfSubjectReview as the token', 201);
    t.equal(res.body.status.userInfo.username, `system:bootstrap:${token.id}`, 'username names the token id');
    t.ok(res.body.status.userInfo.groups?.includes('system:bootstrappers'), 'in system:bootstrappers');
  });

  t.test('the shipped RBAC lets kube-controller-manager auto-approve no kubelet client CSR', async (t) => {
    // csrapproving approves a kubelet client CSR only when this SubjectAccessReview
    // allows the requester (pkg/controller/certificates/approver/sarapprove.go).
    const allowed = (user: string, groups: string[], subresource: string) => mayCreateCsr(cp, user, groups, subresource);
    t.equal(
      await allowed('system:bootstrap:abcdef', ['system:bootstrappers', 'system:authenticated'], 'nodeclient'),
      false,
      'no bootstrap token may have nodeclient',
    );
    t.equal(
      await allowed('system:node:n1', ['system:nodes', 'system:authenticated'], 'selfnodeclient'),
      false,
      'no node may have selfnodeclient',
    );
    t.equal(
      await allowed('system:bootstrap:abcdef', ['system:bootstrappers', 'system:authenticated'], 'kubebootnodeclient'),
      true,
      "a bootstrap token may ask kubeboot approver (the approver's own subresource)",
    );
  });

  t.test('a kubelet client CSR from a bootstrap token is approved by kubeboot approver and signed by the cluster CA', async (t) => {
    const token = await cp.admin.createBootstrapToken();
    const { csr, cert, keys } = await submitNodeCsr(cp, { token: token.token }, 'system:node:e2e-node');
    const approved = (csr.status.conditions ?? []).find((c: { type: string }) => c.type === 'Approved');
    t.equal(approved?.reason, 'KubebootApprover', "approved by the plane's kubeboot approver, not by a person nor kube-controller-manager");
    t.equal(csr.spec.username, `system:bootstrap:${token.id}`, 'requested by the token');

    const ca = new x509.X509Certificate(cp.caPem);
    t.ok(await cert.verify({ publicKey: ca.publicKey, signatureOnly: true }), 'signature chains to the cluster CA');
    t.equal(cert.issuer, ca.subject, 'issued by the cluster CA');
    t.same(Buffer.from(cert.publicKey.rawData), Buffer.from(await crypto.subtle.exportKey('spki', keys.publicKey)), 'certifies our key');
    t.match(cert.subject, /CN=system:node:e2e-node/, 'subject CN as requested');
    t.match(cert.subject, /O=system:nodes/, 'subject O as requested');

    // The issued cert is a working node identity.
    const me = expectStatus(
      await whoAmI(cp, { certPem: cert.toString('pem'), keyPem: privateKeyPem(keys.privateKey) }),
      'SelfSubjectReview as the node',
      201,
    );
    t.equal(me.body.status.userInfo.username, 'system:node:e2e-node', 'authenticates as the node');
    t.ok(me.body.status.userInfo.groups?.includes('system:nodes'), 'in system:nodes');
  });

  t.test('a node renewing with its current cert gets its CSR approved (kubebootselfnodeclient)', async (t) => {
    const current = await cp.mintClientCert({ commonName: 'system:node:e2e-renew', organizations: ['system:nodes'] });
    const { csr, cert } = await submitNodeCsr(cp, current, 'system:node:e2e-renew');
    const approved = (csr.status.conditions ?? []).find((c: { type: string }) => c.type === 'Approved');
    t.equal(approved?.reason, 'KubebootApprover', "approved by the plane's kubeboot approver");
    t.equal(csr.spec.username, 'system:node:e2e-renew', 'requested by the node itself');
    t.match(cert.subject, /CN=system:node:e2e-renew/, 'signed for the same node');
  });

  t.test('kubectl works with the admin kubeconfig', async (t) => {
    // build.sh builds kubectl when the machine has none, so there always is one.
    const kubectlPath = cp.kubectlPath;
    if (!kubectlPath) throw new Error('no kubectl: neither on PATH nor built by test/controlplane/build.sh');
    const kubectl = (...args: string[]) =>
      run(kubectlPath, ['--kubeconfig', cp.adminKubeconfig, '--cache-dir', `${cp.dir}/kubectl-cache`, ...args], {
        timeout: 60_000,
      });
    t.equal((await kubectl('get', '--raw', '/readyz')).stdout.trim(), 'ok', 'kubectl get --raw /readyz');
    const review = JSON.parse((await kubectl('auth', 'whoami', '-o', 'json')).stdout) as SelfSubjectReview;
    t.equal(review.status.userInfo.username, 'kubeboot-admin', 'kubectl auth whoami names the admin');
    t.ok(review.status.userInfo.groups?.includes('system:masters'), 'in system:masters');
  });

  t.test('an expired bootstrap token is rejected with 401', async (t) => {
    const token = await cp.admin.createBootstrapToken({ expiration: new Date(Date.now() - 60_000) });
    t.equal((await whoAmI(cp, { token: token.token })).status, 401, 'Unauthorized');
  });

  t.test('cluster-info is readable anonymously and signed for each new token', async (t) => {
    const token = await cp.admin.createBootstrapToken();
    const anonymous = kubeClient({ server: cp.server, caPem: cp.caPem });
    t.teardown(() => anonymous.close());
    const key = `jws-kubeconfig-${token.id}`;
    const data = await cp.admin.waitFor(`cluster-info to gain ${key}`, async () => {
      const res = await anonymous.request<{ data?: Record<string, string> }>(
        'GET',
        '/api/v1/namespaces/kube-public/configmaps/cluster-info',
      );
      expectStatus(res, 'anonymous GET cluster-info', 200);
      return res.body.data?.[key] ? res.body.data : undefined;
    });
    // A detached JWS (header..signature), HS256 keyed with the token secret, over data.kubeconfig.
    const [header, payload, signature] = (data[key] ?? '').split('.');
    t.equal(payload, '', 'detached payload');
    t.same(JSON.parse(Buffer.from(header ?? '', 'base64url').toString()), { alg: 'HS256', kid: token.id }, 'HS256, kid = token id');
    const expected = createHmac('sha256', token.secret)
      .update(`${header}.${Buffer.from(data.kubeconfig ?? '').toString('base64url')}`)
      .digest('base64url');
    t.equal(signature, expected, 'signed with the token secret');
  });

  t.test('measurements', async (t) => {
    const rss = cp.peakRss();
    t.comment(
      `peak RSS (VmHWM, MiB): ${Object.entries(rss)
        .map(([n, k]) => `${n}=${Math.round((k ?? 0) / 1024)}`)
        .join(' ')}`,
    );
    t.ok(
      Object.values(rss).every((k) => k !== undefined && k > 0),
      'every component is alive',
    );
  });
}
