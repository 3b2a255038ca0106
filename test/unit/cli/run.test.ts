import t from 'tap';
import path from 'node:path';
import { Writable } from 'node:stream';
import winston from 'winston';
import { runDaemonCommand } from '../../../agent/cli/run.js';
import { defaultConfig } from '../../../agent/config/defaults.js';

t.test('kubeboot run warns when the status listener is not on loopback', async (t) => {
  const root = t.testdir();
  const config = defaultConfig('worker-1');
  config.stateDir = path.join(root, 'state');
  config.bootstrapKubeconfig = path.join(root, 'bootstrap-kubelet.conf');
  config.kubelet.kubeconfig = path.join(root, 'kubelet.conf');
  config.kubelet.certDir = path.join(root, 'pki');
  config.kubeProxy.enabled = false;
  const lines: string[] = [];
  const logger = winston.createLogger({
    format: winston.format.json(),
    transports: [new winston.transports.Stream({ stream: new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }) })],
  });
  // Already stopped: the daemon starts, binds, and returns at once.
  const stop = new AbortController();
  stop.abort();
  config.listen = '0.0.0.0:0';
  await runDaemonCommand(config, logger, stop.signal, async () => config);
  t.ok(
    lines.some((l) => /listen 0\.0\.0\.0:0 is not a loopback address/.test(l)),
    'warned',
  );
  lines.length = 0;
  config.listen = '127.0.0.1:0';
  await runDaemonCommand(config, logger, stop.signal, async () => config);
  t.notOk(
    lines.some((l) => /not a loopback address/.test(l)),
    'no warning on loopback',
  );
});
