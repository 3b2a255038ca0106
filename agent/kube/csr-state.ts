/**
 * What a CertificateSigningRequest's status means for the waiting node.
 * Pure: a function of the object the API returned.
 * matches client-go csr.WaitForCertificate: any Denied is terminal, Failed
 * is terminal, Approved with a certificate is done, Approved without one
 * keeps waiting for the signer.
 */
export interface CsrCondition {
  type: string;
  status?: string;
  reason?: string;
  message?: string;
}

export interface CertificateSigningRequest {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; uid?: string; resourceVersion?: string; creationTimestamp?: string };
  spec: {
    request: string;
    signerName: string;
    usages?: string[];
    expirationSeconds?: number;
    username?: string;
    groups?: string[];
  };
  status?: { certificate?: string; conditions?: CsrCondition[] };
}

export type CsrState =
  | { state: 'pending'; approved: boolean }
  | { state: 'issued'; certPem: string }
  | { state: 'denied'; reason: string; message: string }
  | { state: 'failed'; reason: string; message: string };

export function csrState(csr: CertificateSigningRequest): CsrState {
  const conditions = csr.status?.conditions ?? [];
  const denied = conditions.find((c) => c.type === 'Denied');
  if (denied) return { state: 'denied', reason: denied.reason ?? 'Denied', message: denied.message ?? '' };
  const failed = conditions.find((c) => c.type === 'Failed');
  if (failed) return { state: 'failed', reason: failed.reason ?? 'Failed', message: failed.message ?? '' };
  const approved = conditions.some((c) => c.type === 'Approved' && c.status !== 'False');
  const certificate = csr.status?.certificate;
  if (approved && certificate) return { state: 'issued', certPem: Buffer.from(certificate, 'base64').toString('utf8') };
  return { state: 'pending', approved };
}

/** The operator-facing line for a CSR nobody has approved yet. */
export function pendingNotice(name: string, pendingSeconds: number, signerName: string): string {
  const approver =
    signerName === 'kubernetes.io/kube-apiserver-client-kubelet'
      ? 'kubeboot approver approves node client CSRs (unless run with --no-approve-kubelet-client): is it running, and does the token have its binding? its Event on the CSR names the rule that refused it'
      : `nothing in a stock cluster approves ${signerName} CSRs`;
  return `CSR ${name} pending approval for ${Math.round(pendingSeconds)}s; approve it with: kubectl certificate approve ${name} (${approver})`;
}
