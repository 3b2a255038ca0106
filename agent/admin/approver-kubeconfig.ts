/**
 * The kubeconfig `kubeboot approver` runs with on a control-plane node: a
 * client certificate for the user `kubeboot:approver` (the user the shipped
 * approver manifests bind), issued by `kubernetes.io/kube-apiserver-client`.
 * The admin's credential creates and approves the CSR, as
 * `kubectl certificate approve` would; the key never leaves this process
 * until it is written, embedded, in one 0600 file.
 */
import { randomBytes } from 'node:crypto';
import { KubebootError } from '../errors.js';
import type { KeyAlgorithm, KeyUsage, Subject } from '../identity.js';
import { KubeClient } from '../kube/client.js';
import { waitForCertificate } from '../kube/csr-requests.js';
import type { CertificateSigningRequest } from '../kube/csr-state.js';
import { whoAmI } from '../kube/whoami.js';
import { renderEmbeddedKubeconfig } from '../kubeconfig/render.js';
import type { Logger } from '../log.js';
import { checkIssuedCertificate, parseCertificateChain } from '../pki/certificate.js';
import { createCsrPem } from '../pki/pkcs10.js';
import { generateKey } from '../pki/keys.js';
import type { Admin } from './connect.js';
import { systemClock, type Clock } from '../time/clock.js';

export const APPROVER_USER = 'kubeboot:approver';
const SIGNER = 'kubernetes.io/kube-apiserver-client';
const USAGES: KeyUsage[] = ['digital signature', 'client auth'];
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

export interface ApproverKubeconfig {
  text: string;
  csrName: string;
  notAfter: Date;
}

export async function issueApproverKubeconfig(
  admin: Admin,
  opts: { keyAlgorithm: KeyAlgorithm; expirationSeconds: number; logger: Logger; signal?: AbortSignal; clock?: Clock },
): Promise<ApproverKubeconfig> {
  const clock = opts.clock ?? systemClock;
  const { server, caPem, tlsServerName, file } = admin.kubeconfig;
  if (caPem === null)
    throw new KubebootError(
      `${file}: names no certificate authority to embed for the approver; give the cluster CA in the admin kubeconfig`,
    );
  const subject: Subject = { commonName: APPROVER_USER, organizations: [] };
  const key = await generateKey(opts.keyAlgorithm);
  const csrName = `kubeboot-approver-${randomBytes(4).toString('hex')}`;
  const body: CertificateSigningRequest = {
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: { name: csrName },
    spec: {
      request: Buffer.from(await createCsrPem({ key, subject })).toString('base64'),
      signerName: SIGNER,
      usages: USAGES,
      expirationSeconds: opts.expirationSeconds,
    },
  };
  const signal = opts.signal ? { signal: opts.signal } : {};
  const created = (await admin.client.request<CertificateSigningRequest>('POST', CSRS, { body, ...signal })).body;
  const approval = {
    type: 'Approved',
    status: 'True',
    reason: 'KubebootApproverKubeconfig',
    message: `kubeboot approver-kubeconfig: the credential of ${APPROVER_USER}`,
  };
  const approve = { ...created, status: { ...(created.status ?? {}), conditions: [...(created.status?.conditions ?? []), approval] } };
  await admin.client.request('PUT', `${CSRS}/${csrName}/approval`, { body: approve, ...signal });
  const certPem = await waitForCertificate(admin.client, created, {
    logger: opts.logger,
    timeoutMs: 120_000,
    pendingNoticeMs: 30_000,
    clock,
    ...signal,
  });

  const problems = await checkIssuedCertificate({
    certPem,
    caPems: [caPem],
    publicKeyDer: key.publicKeyDer,
    subject,
    usages: USAGES,
    now: clock.now(),
  });
  if (problems.length > 0) throw new KubebootError(`CSR ${csrName}: the issued certificate is unusable: ${problems.join('; ')}`);
  // Proven before it is written, as the node's credentials are.
  const client = new KubeClient(
    { server, caPem, tlsServerName, unsafeSkipTlsVerify: false },
    { kind: 'client-certificate', certPem, keyPem: key.pem },
  );
  try {
    const user = await whoAmI(client, opts.signal);
    if (user.username !== APPROVER_USER)
      throw new KubebootError(`the issued certificate authenticates as ${user.username || '(nobody)'}, want ${APPROVER_USER}`);
  } finally {
    await client.close();
  }
  const text = renderEmbeddedKubeconfig({ server, caPem, tlsServerName, userName: APPROVER_USER, certPem, keyPem: key.pem });
  return { text, csrName, notAfter: parseCertificateChain(certPem)[0]!.notAfter };
}
