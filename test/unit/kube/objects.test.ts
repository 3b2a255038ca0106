// Paths built from names the API server handed us, and objects read back:
// only a real path segment becomes one, only the kind and name asked for is used.
import t from 'tap';
import { UnexpectedObjectError } from '../../../agent/errors.js';
import { expectObject, objectPath, pathSegmentProblem } from '../../../agent/kube/objects.js';

t.test('a name becomes a path segment only when the API server would read it as one', async (t) => {
  t.equal(objectPath('/api/v1/nodes', 'worker-1'), '/api/v1/nodes/worker-1');
  t.equal(objectPath('/x', 'a b\n#?'), '/x/a%20b%0A%23%3F', 'everything else is percent-encoded');
  for (const bad of ['', '.', '..', 'a/b', '../secrets', '100%']) {
    t.ok(pathSegmentProblem(bad), `${JSON.stringify(bad)} is refused`);
    t.throws(() => objectPath('/api/v1/nodes', bad), UnexpectedObjectError);
  }
});

t.test('an object read back must be the kind and name asked for', async (t) => {
  const node = { kind: 'Node', metadata: { name: 'n1' } };
  t.equal(expectObject(node, 'Node', 'n1'), node);
  t.throws(
    () => expectObject({ kind: 'NodeList', metadata: {}, items: [] }, 'Node', 'n1'),
    /expected a Node, the API server answered a NodeList/,
  );
  t.throws(() => expectObject(node, 'Node', 'n2'), UnexpectedObjectError, 'another Node');
  t.throws(() => expectObject('text', 'Node', 'n1'), UnexpectedObjectError, 'not an object at all');
  t.throws(() => expectObject(null, 'Lease'), UnexpectedObjectError);
  t.equal(
    expectObject({ kind: 'CertificateSigningRequestList', metadata: {} }, 'CertificateSigningRequestList').kind,
    'CertificateSigningRequestList',
    'a list: kind only',
  );
});
