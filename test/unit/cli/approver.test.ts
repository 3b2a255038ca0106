import t from 'tap';
import { kubeletClientOffProblem } from '../../../agent/approver/startup.js';
import { approverPolicy } from '../../../agent/cli/approver.js';
import { defaultConfig } from '../../../agent/config/defaults.js';

t.test('the approver policy built from the defaults approves kubelet client CSRs', async (t) => {
  t.equal(approverPolicy(defaultConfig('cp-1')).kubeletClient?.enabled, true);
});

t.test('kubelet client approval off with nothing else approving: one loud line naming the flag', async (t) => {
  const line = kubeletClientOffProblem({ grants: [] });
  t.match(line, /^KUBELET CLIENT APPROVAL IS OFF \(--no-approve-kubelet-client\)/);
  t.match(line, /every node drops off the cluster/);
});

t.test('kubelet client approval off while the authorizer still lets kube-controller-manager approve: nothing to say', async (t) => {
  t.equal(kubeletClientOffProblem({ grants: [{ groups: ['system:nodes', 'system:authenticated'], subresource: 'selfnodeclient' }] }), null);
});
