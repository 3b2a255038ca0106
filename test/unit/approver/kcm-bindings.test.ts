// Which ClusterRoleBindings still let kube-controller-manager approve kubelet
// client CSRs: found across list pages by the role they bind, and said on
// /readyz, which looks again (at most once a minute) so deleting them shows.
import t from 'tap';
import { MockAgent } from 'undici';
import { kcmBindingsMonitor, kcmBindingsProblem, kcmNodeClientBindings } from '../../../agent/approver/kcm-bindings.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { FakeClock } from '../../support/fake-time.js';
import { until } from '../../support/until.js';

const server = 'https://api.test';
const CRBS = '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings';
const binding = (name: string, role: string, kind = 'ClusterRole') => ({ metadata: { name }, roleRef: { kind, name: role } });
const NODECLIENT = 'system:certificates.k8s.io:certificatesigningrequests:nodeclient';
const SELFNODECLIENT = 'system:certificates.k8s.io:certificatesigningrequests:selfnodeclient';

t.test('bindings to nodeclient or selfnodeclient are found on every page, and nothing else', async (t) => {
  const mock = new MockAgent();
  mock.disableNetConnect();
  const pool = mock.get(server);
  pool.intercept({ path: `${CRBS}?limit=500`, method: 'GET' }).reply(200, {
    items: [binding('kubeadm:node-autoapprove-bootstrap', NODECLIENT), binding('cluster-admin', 'cluster-admin')],
    metadata: { continue: 'next' },
  });
  pool.intercept({ path: `${CRBS}?limit=500&continue=next`, method: 'GET' }).reply(200, {
    items: [binding('kubeadm:node-autoapprove-certificate-rotation', SELFNODECLIENT), binding('odd', NODECLIENT, 'Role')],
    metadata: {},
  });
  const names = await kcmNodeClientBindings(new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock));
  t.same(names, ['kubeadm:node-autoapprove-bootstrap', 'kubeadm:node-autoapprove-certificate-rotation']);
  t.equal(
    kcmBindingsProblem(names),
    'kube-controller-manager still approves kubelet client CSRs on a name-prefix check, whatever this approver refuses, through ClusterRoleBinding kubeadm:node-autoapprove-bootstrap, kubeadm:node-autoapprove-certificate-rotation; delete them: kubectl delete clusterrolebinding kubeadm:node-autoapprove-bootstrap kubeadm:node-autoapprove-certificate-rotation',
  );
  t.equal(kcmBindingsProblem([]), null);
  await mock.close();
});

t.test("/readyz's line follows the bindings, looked at again at most once a minute", async (t) => {
  const clock = new FakeClock();
  let answer: string[] = ['kubeboot:node-autoapprove-bootstrap'];
  let reads = 0;
  const monitor = kcmBindingsMonitor(async () => (reads++, answer), clock);
  t.equal(monitor.detail(), 'kubelet client approval: on; not looked at yet');
  await until('the first look', () => reads === 1);
  await new Promise((resolve) => setImmediate(resolve));
  t.match(
    monitor.detail(),
    /^kubelet client approval: on; kube-controller-manager still approves .* kubectl delete clusterrolebinding kubeboot:node-autoapprove-bootstrap$/,
  );
  answer = [];
  clock.advance(30_000);
  monitor.detail();
  t.equal(reads, 1, 'not looked at again within the minute');
  clock.advance(30_000);
  monitor.detail();
  await until('the look a minute later', () => reads === 2);
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(monitor.detail(), 'kubelet client approval: on; no ClusterRoleBinding lets kube-controller-manager approve them');
});
