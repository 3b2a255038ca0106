// The approver's CSR cache: indexed by requester and signer, and never set
// back to an older version of an object it holds.
import t from 'tap';
import { CsrCache, isNewer } from '../../../agent/approver/cache.js';
import type { ApproverCsr } from '../../../agent/approver/csr-facts.js';

const csr = (
  name: string,
  username: string,
  rv: string,
  signerName = 'kubernetes.io/kube-apiserver-client',
  uid = `uid-${name}`,
): ApproverCsr => ({
  metadata: { name, uid, resourceVersion: rv },
  spec: { request: '', signerName, username },
});

t.test('sameRequester finds exactly the CSRs of one requester and signer, through updates and deletes', async (t) => {
  const cache = new CsrCache();
  cache.set(csr('a', 'system:node:n1', '1'));
  cache.set(csr('b', 'system:node:n1', '2'));
  cache.set(csr('c', 'system:node:n2', '3'));
  cache.set(csr('d', 'system:node:n1', '4', 'kubernetes.io/kubelet-serving'));
  const names = (of: ApproverCsr) =>
    cache
      .sameRequester(of)
      .map((c) => c.metadata.name)
      .sort();
  t.same(names(csr('x', 'system:node:n1', '0')), ['a', 'b']);
  cache.delete('a');
  t.same(names(csr('x', 'system:node:n1', '0')), ['b']);
  cache.set(csr('b', 'system:node:n2', '5'));
  t.same(names(csr('x', 'system:node:n1', '0')), [], 'a changed requester moves in the index');
  t.same(names(csr('x', 'system:node:n2', '0')), ['b', 'c']);
  t.equal(cache.size, 3);
});

t.test('a snapshot older than the cached object does not replace it (a relist after this process approved)', async (t) => {
  const cache = new CsrCache();
  cache.set({ ...csr('z', 'system:node:n1', '50'), status: { conditions: [{ type: 'Approved', status: 'True' }] } });
  cache.set(csr('z', 'system:node:n1', '30'));
  t.equal(cache.get('z')?.metadata.resourceVersion, '50', 'the approval stays');
  cache.set(csr('z', 'system:node:n1', '30', undefined, 'another-uid'));
  t.equal(cache.get('z')?.metadata.uid, 'another-uid', 'a new object of the same name replaces it');
  t.notOk(isNewer(csr('a', 'u', '9'), csr('b', 'u', '1')), 'different objects are never "newer"');
});
