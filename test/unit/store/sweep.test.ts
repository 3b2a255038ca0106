import t from 'tap';
import { lstat, mkdir, readdir, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { runBootstrap } from '../../../agent/cli/bootstrap.js';
import { runDaemonCommand } from '../../../agent/cli/run.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { silentLogger } from '../../../agent/log.js';
import { sweepTempFiles, writtenDirs } from '../../../agent/store/sweep.js';

const logger = silentLogger();

/** A node layout under `root` with one leftover temp file per directory kubeboot writes. */
async function nodeWithLeftovers(root: string) {
  const config = defaultConfig('worker-1');
  config.stateDir = path.join(root, 'state');
  config.bootstrapKubeconfig = path.join(root, 'etc', 'bootstrap-kubelet.conf');
  config.kubelet.kubeconfig = path.join(root, 'etc', 'kubelet.conf');
  config.kubelet.certDir = path.join(root, 'kubelet-pki');
  config.kubeProxy.kubeconfig = path.join(root, 'etc', 'kube-proxy.conf');
  config.kubeProxy.certDir = path.join(root, 'proxy-pki');
  const leftovers = [
    path.join(config.stateDir, '.status.json.tmp-0123456789ab'),
    path.join(config.stateDir, '.kube-proxy.key.pending.tmp-a1b2c3d4e5f6'),
    path.join(config.kubelet.certDir, '.kubelet-client-2026-11-30-10-00-00.pem.tmp-00aa11bb22cc'),
    path.join(config.kubeProxy.certDir, '.kube-proxy-client-2026-11-30-10-00-00.pem.tmp-ffeeddccbbaa'),
    path.join(root, 'etc', '.kubelet.conf.tmp-abcdefabcdef'),
  ];
  const kept = [
    path.join(config.stateDir, 'status.json'),
    path.join(config.stateDir, 'notes.tmp-12345'),
    path.join(root, 'etc', 'admin.conf'),
  ];
  for (const file of [...leftovers, ...kept]) {
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, 'x', { mode: 0o600 });
  }
  const link = path.join(config.kubelet.certDir, 'kubelet-client-current.pem.tmp-0a0b0c0d0e0f');
  await symlink('/nonexistent', link);
  leftovers.push(link);
  // A directory with a temp-like name is not kubeboot's and stays.
  await mkdir(path.join(config.stateDir, '.dir.tmp-000000000000'));
  kept.push(path.join(config.stateDir, '.dir.tmp-000000000000'));
  return { config, leftovers, kept };
}

async function exists(file: string): Promise<boolean> {
  return lstat(file).then(
    () => true,
    () => false,
  );
}

t.test('sweepTempFiles removes kubeboot temp files and links in every directory it writes, nothing else', async (t) => {
  const { config, leftovers, kept } = await nodeWithLeftovers(t.testdir());
  const removed = await sweepTempFiles([...writtenDirs(config), '/nonexistent-dir'], logger);
  t.same(removed.sort(), [...leftovers].sort());
  for (const file of leftovers) t.notOk(await exists(file), `${file} removed`);
  for (const file of kept) t.ok(await exists(file), `${file} kept`);
});

t.test('kubeboot bootstrap sweeps temp files at start, even when it then fails', async (t) => {
  const { config, leftovers } = await nodeWithLeftovers(t.testdir());
  await t.rejects(runBootstrap(config, logger, new AbortController().signal));
  for (const file of leftovers) t.notOk(await exists(file), `${path.basename(file)} removed`);
  t.ok((await readdir(config.stateDir)).includes('status.json'));
});

t.test('kubeboot run sweeps temp files at start', async (t) => {
  const { config, leftovers } = await nodeWithLeftovers(t.testdir());
  config.listen = null;
  const stop = new AbortController();
  stop.abort();
  await runDaemonCommand(config, logger, stop.signal, async () => config);
  for (const file of leftovers) t.notOk(await exists(file), `${path.basename(file)} removed`);
});
