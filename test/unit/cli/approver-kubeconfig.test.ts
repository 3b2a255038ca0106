// `kubeboot approver-kubeconfig` refuses a lifetime the API would reject
// before it touches the cluster. (Against a real control plane it runs in
// test/systemd/cloud-init-join.test.ts, whose approver then leads with it.)
import t from 'tap';
import { runApproverKubeconfig } from '../../../agent/cli/approver-kubeconfig.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { createLogger } from '../../../agent/log.js';

const logger = createLogger({ level: 'error', format: 'json' });
const config = defaultConfig('admin');

t.test('--ttl below 10m or not a duration is refused, naming the flag, before any admin kubeconfig is read', async (t) => {
  const env = { KUBECONFIG: '/nonexistent/admin.conf' };
  await t.rejects(runApproverKubeconfig(config, { ttl: '5m' }, env, logger, new AbortController().signal), {
    message: 'command line: --ttl: at least 10m (the API rejects shorter)',
  });
  await t.rejects(runApproverKubeconfig(config, { ttl: 'soon' }, env, logger, new AbortController().signal), {
    message: /command line: --ttl: expected seconds or a duration/,
  });
  await t.rejects(
    runApproverKubeconfig(config, {}, env, logger, new AbortController().signal),
    { message: /no admin kubeconfig: nothing at KUBECONFIG/ },
    'then the admin kubeconfig is looked for as kubectl does',
  );
});
