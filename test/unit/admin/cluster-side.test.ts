// What the admin commands make of the cluster they find: which groups a new
// token carries (kubeadm's only where kubeadm's RBAC alone serves it), when
// nothing can be made, and whether a join keeps a kube-proxy certificate.
import t from 'tap';
import {
  approvalNotes,
  KUBEADM_TOKEN_GROUP,
  nodeKubeProxy,
  tokenCluster,
  tokenGroups,
  UnservedClusterError,
} from '../../../agent/admin/cluster-side.js';
import { joinCommand } from '../../../agent/admin/user-data.js';
import { ExitCode } from '../../../agent/errors.js';

const SERVER = 'https://api.example:6443';
const PIN = `sha256:${'ab'.repeat(32)}`;
const TOKEN = 'abcdef.0123456789abcdef';

t.test('what kind of cluster: the authorizer’s answers for a token as asked, then with kubeadm’s group', async (t) => {
  t.same(tokenCluster({ found: { requested: true, withKubeadmGroup: null } }), { kind: 'served' }, "kubeboot's RBAC (or the admin's own)");
  t.same(tokenCluster({ found: { requested: false, withKubeadmGroup: true } }), { kind: 'kubeadm' }, "only kubeadm's group may");
  t.same(tokenCluster({ found: { requested: false, withKubeadmGroup: false } }), { kind: 'unserved' });
  t.same(
    tokenCluster({ found: { requested: false, withKubeadmGroup: null } }),
    { kind: 'unserved' },
    'asked for kubeadm’s group already, refused',
  );
  t.same(tokenCluster({ unknown: '403 Forbidden' }), { kind: 'unknown', why: '403 Forbidden' });
});

t.test('a token made where kubeboot’s RBAC serves every token keeps exactly the groups asked for, and nothing is said', async (t) => {
  t.same(tokenGroups({ kind: 'served' }, [], SERVER), { groups: [], notes: [] });
  t.same(tokenGroups({ kind: 'served' }, ['system:bootstrappers:pool-a'], SERVER).groups, ['system:bootstrappers:pool-a']);
});

t.test('a token made on a kubeadm cluster without kubeboot’s RBAC carries kubeadm’s group, and the admin is told why', async (t) => {
  const { groups, notes } = tokenGroups({ kind: 'kubeadm' }, ['system:bootstrappers:pool-a'], SERVER);
  t.same(groups, ['system:bootstrappers:pool-a', KUBEADM_TOKEN_GROUP], 'its own groups kept, kubeadm’s added');
  t.equal(notes.length, 1);
  t.match(notes[0], `the token carries group ${KUBEADM_TOKEN_GROUP}`);
  t.match(notes[0], 'kubeadm:kubelet-bootstrap');
  t.match(notes[0], 'kube-system/kubeadm-config', 'kubeadm join’s preflight reads it');
});

t.test('where nothing lets a token create its CSR, no token is made: one line naming what to apply, exit 1', async (t) => {
  const err = (() => {
    try {
      tokenGroups({ kind: 'unserved' }, [], SERVER);
    } catch (e) {
      return e;
    }
  })() as UnservedClusterError;
  t.type(err, UnservedClusterError);
  t.equal(err.code, ExitCode.other);
  t.equal(
    err.message,
    `no bootstrap token may create its CSR at ${SERVER} (neither kubeboot's RBAC nor kubeadm's for ${KUBEADM_TOKEN_GROUP}), so no token was made; apply kubeboot's and run its approver (docs/node-identity.md): kubectl apply -f /usr/share/kubeboot/manifests/`,
  );
  t.notMatch(err.message, /\n/);
  t.throws(() => tokenGroups({ kind: 'unserved' }, ['system:bootstrappers:pool-a'], SERVER), {
    message: /^no bootstrap token in system:bootstrappers:pool-a may create its CSR/,
  });
});

t.test('an admin who may not ask gets the token as asked and a warning naming kubeadm’s group, not a failure', async (t) => {
  const why = 'POST /apis/authorization.k8s.io/v1/subjectaccessreviews: 403 Forbidden';
  const { groups, notes } = tokenGroups({ kind: 'unknown', why }, [], SERVER);
  t.same(groups, []);
  t.equal(notes.length, 1);
  t.match(notes[0], /^warning: could not ask whether a bootstrap token may create its CSR here \(POST .*403 Forbidden\)/);
  t.match(notes[0], `--groups ${KUBEADM_TOKEN_GROUP}`);
});

t.test(
  'who approves the new token: a bound one kube-controller-manager auto-approves is bound in name only; an unbound one nothing else approves, the approver refuses',
  async (t) => {
    t.same(approvalNotes({ found: false }, true), [], 'bound, nothing auto-approves it: the binding holds');
    t.same(approvalNotes({ unknown: '403' }, true), [], 'not known: the token is made as asked, nothing claimed');
    t.same(approvalNotes({ found: true }, false), [], 'unbound where kube-controller-manager approves it: works as before');
    t.same(approvalNotes({ unknown: '403' }, false), [], 'unbound, not known who approves it: nothing claimed');
    t.match(
      approvalNotes({ found: false }, false),
      [
        /^warning: this token is bound to no node name: kubeboot approver .*refuses .*--unsafe-approve-unbound-tokens; bind it with --node NAME or --pool/,
      ],
      'unbound, nothing else approves it: the approver will refuse it',
    );
    const [note] = approvalNotes({ found: true }, true);
    t.match(note, /^warning: kube-controller-manager approves kubelet client CSRs from this token for any node name/);
    t.match(note, 'kubeadm:node-autoapprove-bootstrap');
  },
);

t.test('kube-proxy as a DaemonSet: the node keeps no kube-proxy certificate unless the admin says otherwise', async (t) => {
  const ds = { found: 'daemonset' as const };
  t.same(nodeKubeProxy(ds, undefined).enabled, false);
  t.match(nodeKubeProxy(ds, undefined).notes, [/^kube-proxy runs as DaemonSet kube-system\/kube-proxy .*--no-kube-proxy/]);
  t.same(nodeKubeProxy(ds, false), { enabled: false, notes: [] }, 'already off: nothing to say');
  const on = nodeKubeProxy(ds, true);
  t.equal(on.enabled, undefined, '--set kubeProxy.enabled=true wins');
  t.match(on.notes, [/^warning: .*only kubeboot approver approves/]);
  t.same(nodeKubeProxy({ found: 'node' }, undefined), { enabled: undefined, notes: [] }, 'no DaemonSet: the node’s own setting');
  t.same(nodeKubeProxy(null, undefined), { enabled: undefined, notes: [] }, 'cluster not asked');
  const unknown = nodeKubeProxy({ unknown: '403 Forbidden' }, undefined);
  t.equal(unknown.enabled, undefined);
  t.match(unknown.notes, [/^warning: could not tell whether kube-proxy runs as DaemonSet .*\(403 Forbidden\).*--no-kube-proxy/]);
  t.same(nodeKubeProxy({ unknown: '403' }, false).notes, [], 'the admin decided: no warning');
});

t.test('the join line for such a cluster turns the node’s kube-proxy identity off', async (t) => {
  const join = { server: SERVER, token: TOKEN, pins: [PIN] };
  t.equal(
    joinCommand({ ...join, kubeProxy: false }),
    `kubeboot bootstrap --server ${SERVER} --token ${TOKEN} --ca-cert-hash ${PIN} --no-kube-proxy`,
  );
  t.equal(joinCommand({ ...join, kubeProxy: undefined }), joinCommand(join), 'otherwise the line is as before');
});
