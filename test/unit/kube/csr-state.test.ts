import t from 'tap';
import { csrState, pendingNotice, type CertificateSigningRequest } from '../../../agent/kube/csr-state.js';

const csr = (status: CertificateSigningRequest['status']): CertificateSigningRequest => ({
  metadata: { name: 'node-csr-x' },
  spec: { request: '', signerName: 'kubernetes.io/kube-apiserver-client-kubelet' },
  ...(status ? { status } : {}),
});
const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

t.test('a CSR without conditions is pending', async (t) => {
  t.same(csrState(csr(undefined)), { state: 'pending', approved: false });
});

t.test('approved but not yet signed keeps waiting for the signer', async (t) => {
  t.same(csrState(csr({ conditions: [{ type: 'Approved', status: 'True' }] })), { state: 'pending', approved: true });
});

t.test('approved with a certificate is issued, decoded from base64', async (t) => {
  const state = csrState(csr({ conditions: [{ type: 'Approved', status: 'True' }], certificate: Buffer.from(pem).toString('base64') }));
  t.same(state, { state: 'issued', certPem: pem });
});

t.test('any Denied condition is terminal and carries the reason, even next to Approved', async (t) => {
  const state = csrState(
    csr({
      conditions: [
        { type: 'Approved', status: 'True' },
        { type: 'Denied', status: 'True', reason: 'NotOnTheInventory', message: 'unknown host' },
      ],
    }),
  );
  t.same(state, { state: 'denied', reason: 'NotOnTheInventory', message: 'unknown host' });
});

t.test('Failed is terminal even when a certificate is present', async (t) => {
  const state = csrState(
    csr({
      conditions: [{ type: 'Approved' }, { type: 'Failed', reason: 'SignerValidationFailure' }],
      certificate: Buffer.from(pem).toString('base64'),
    }),
  );
  t.equal(state.state, 'failed');
});

t.test('the pending notice names the exact approve command and why nothing approved it', async (t) => {
  t.match(
    pendingNotice('node-csr-abc', 61.4, 'kubernetes.io/kube-apiserver-client-kubelet'),
    /pending approval for 61s; approve it with: kubectl certificate approve node-csr-abc .*kubeboot approver approves node client CSRs \(unless run with --no-approve-kubelet-client\).*binding/,
  );
  t.match(
    pendingNotice('node-csr-abc', 5, 'kubernetes.io/kube-apiserver-client'),
    /nothing in a stock cluster approves kubernetes.io\/kube-apiserver-client CSRs/,
  );
});
