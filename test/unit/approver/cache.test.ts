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

const pendingOf = (name: string, username: string, second: number): ApproverCsr => ({
  metadata: { name, uid: `uid-${name}`, resourceVersion: '1', creationTimestamp: `2026-01-01T00:00:${String(second).padStart(2, '0')}Z` },
  spec: { request: '', signerName: 'kubernetes.io/kube-apiserver-client', username },
});

t.test("a requester's pending CSRs are bounded by its share, oldest first, and the others' are not touched", async (t) => {
  // Each CSR counts 100 bytes: a share of 300 holds three.
  const cache = new CsrCache(() => 100, 300);
  const flood = 'system:bootstrap:abcdef';
  for (const [i, second] of [5, 4, 3].entries()) t.same(cache.set(pendingOf(`f${i}`, flood, second)), { kept: true, evicted: [] });
  t.same(cache.set(pendingOf('late', flood, 9)), { kept: false, evicted: [] }, 'a younger one past the share is left out');
  t.equal(cache.get('late'), undefined, 'and not kept');
  const older = cache.set(pendingOf('early', flood, 1));
  t.same(older.kept, true, 'an older one is kept');
  t.same(
    older.evicted.map((c) => c.metadata.name),
    ['f0'],
    'in place of the youngest',
  );
  t.same(cache.overflow, { requesters: 1, csrs: 2 });
  t.equal(cache.leftOut(flood), 2);
  t.ok(cache.isLeftOut(pendingOf('late', flood, 9)));
  t.equal(cache.pendingBytes(flood), 300);
  t.same(cache.set(pendingOf('node', 'system:node:n1', 10)), { kept: true, evicted: [] }, 'another requester has its own share');
  // Same second: the name decides.
  t.same(
    cache.set(pendingOf('a-same', flood, 1)).evicted.map((c) => c.metadata.name),
    ['f1'],
  );
  t.same(cache.set(pendingOf('z-same', flood, 3)), { kept: false, evicted: [] }, 'a tie with the youngest (f2) goes to the earlier name');
});

t.test('a settled CSR takes no share, and a deleted or settled one is no longer left out', async (t) => {
  const cache = new CsrCache(() => 100, 100);
  const who = 'system:node:n1';
  cache.set(pendingOf('a', who, 1));
  t.equal(cache.set(pendingOf('b', who, 2)).kept, false);
  const settled = { ...pendingOf('a', who, 1), status: { conditions: [{ type: 'Denied', status: 'True' }] } };
  cache.set(settled);
  t.equal(cache.pendingBytes(who), 0, 'settled: room made');
  t.equal(cache.set(pendingOf('b', who, 2)).kept, true, 'the one left out fits when seen again (a re-list)');
  t.same(cache.overflow, { requesters: 0, csrs: 0 });
  t.equal(cache.set(pendingOf('c', who, 3)).kept, false);
  cache.forgetLeftOut(pendingOf('c', who, 3));
  t.same(cache.overflow, { requesters: 0, csrs: 0 }, 'deleted: forgotten');
  cache.set(pendingOf('d', who, 4));
  cache.keepLeftOutOnly(new Set());
  t.same(cache.overflow, { requesters: 0, csrs: 0 }, 'gone from a re-list: forgotten');
});

t.test("a CSR none of the approver's business takes no share: another signer's controller is never reported", async (t) => {
  const cache = new CsrCache(() => 100, 100);
  const sa = 'system:serviceaccount:istio-system:istiod';
  for (let i = 0; i < 5; i++) t.equal(cache.set({ ...pendingOf(`x${i}`, sa, i), notOurs: true }).kept, true);
  t.equal(cache.pendingBytes(sa), 0);
  t.same(cache.overflow, { requesters: 0, csrs: 0 });
});
