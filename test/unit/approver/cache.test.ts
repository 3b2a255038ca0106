// The approver's CSR cache: indexed by requester and signer, never set back
// to an older version of an object it holds, and counting what it holds.
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

t.test('it counts what it holds through sets, replacements and deletes', async (t) => {
  const cache = new CsrCache((c) => c.spec.request.length);
  const sized = (name: string, rv: string, bytes: number): ApproverCsr => {
    const c = csr(name, 'system:node:n1', rv);
    return { ...c, spec: { ...c.spec, request: 'x'.repeat(bytes) } };
  };
  cache.set(sized('a', '1', 100));
  cache.set(sized('b', '1', 50));
  t.equal(cache.bytes, 150);
  cache.set(sized('a', '2', 10));
  t.equal(cache.bytes, 60, 'a newer version replaces the count of the old');
  cache.set(sized('a', '1', 1000));
  t.equal(cache.bytes, 60, 'an older snapshot is neither kept nor counted');
  cache.delete('b');
  cache.delete('missing');
  t.equal(cache.bytes, 10);
  cache.delete('a');
  t.equal(cache.bytes, 0, 'empty, nothing counted');
});
