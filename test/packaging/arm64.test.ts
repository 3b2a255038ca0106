// The arm64 .deb and the aarch64 .rpm run: their own Node and bundle, under
// qemu-user emulation (qemu-aarch64-static with an arm64 loader and libraries
// from a cached debootstrap tree, so no binfmt_misc registration is needed),
// bootstrap a node against the amd64 control plane on loopback.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { controlPlaneOrSkip, type ControlPlane } from '../support/controlplane.js';
import { assertNoSecrets, handToken, launcherNodeFlags, nodeLayout } from '../support/kubeboot.js';
import { spawnTiedToTest } from '../support/processes.js';
import {
  buildPackages,
  buildTools,
  cachedArm64Sysroot,
  cleanEnv,
  elfMachine,
  extractDeb,
  nodeVersion,
  output,
  packages,
  run,
  toolsOrSkip,
  version,
} from './fixtures/packages.js';

const QEMU = 'qemu-aarch64-static';

interface Result {
  code: number | null;
  out: string;
  ms: number;
}

/**
 * The package's /usr/bin/kubeboot, run from the unpacked tree: the wrapper's
 * exec line with its absolute paths moved under `tree`, its Node emulated.
 */
function packagedKubeboot(tree: string, sysroot: string): (args: string[]) => Promise<Result> {
  const wrapper = readFileSync(join(tree, 'usr/bin/kubeboot'), 'utf8');
  const exec = /^exec (\/usr\/lib\/kubeboot\/node) (.*) "\$@"$/m.exec(wrapper);
  if (!exec) throw new Error(`unexpected wrapper:\n${wrapper}`);
  // The wrapper's words, its shipped paths under the extracted tree; `$heap` is
  // what its case statement gives the command.
  const words = [join(tree, exec[1]!), ...exec[2]!.split(' ').map((a) => (a.startsWith('/') ? join(tree, a) : a))];
  return (args) =>
    new Promise((resolve) => {
      const began = Date.now();
      const argv = words.flatMap((w) => (w === '$heap' ? launcherNodeFlags(args[0], wrapper) : [w]));
      // env: only what a unit would give it; tap's NODE_OPTIONS names an amd64 host file.
      const child = spawnTiedToTest(QEMU, ['-L', sysroot, ...argv, ...args], {
        env: { ...cleanEnv, KUBEBOOT_LOG_FORMAT: 'text' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
      child.on('close', (code) => resolve({ code, out, ms: Date.now() - began }));
    });
}

async function whoami(plane: ControlPlane, kubeconfig: string): Promise<string> {
  return output(plane.kubectlPath!, ['--kubeconfig', kubeconfig, 'auth', 'whoami', '-o', 'jsonpath={.status.userInfo.username}']).trim();
}

async function provePackage(t: Test, plane: ControlPlane, what: string, tree: string, sysroot: string): Promise<void> {
  t.equal(elfMachine(join(tree, 'usr/lib/kubeboot/node')), 183, `${what}: the shipped Node is AArch64`);
  const kubeboot = packagedKubeboot(tree, sysroot);
  const v = await kubeboot(['--version']);
  t.equal(v.code, 0, `${what}: --version exits 0 (${v.ms} ms)`);
  t.equal(v.out.trim(), `kubeboot ${version} (node v${nodeVersion})`);

  const name = `${what.replace(/[^a-z0-9]+/g, '-')}-node`;
  const node = await nodeLayout(t.testdir(), name);
  await handToken(plane, node);
  const check = await kubeboot(['check', '--config', node.config]);
  t.equal(check.code, 0, `${what}: check exits 0 with a working bootstrap kubeconfig`, { output: check.out });
  assertNoSecrets(t, check.out, `${what} check`);

  const bootstrap = await kubeboot(['bootstrap', '--config', node.config]);
  t.equal(bootstrap.code, 0, `${what}: bootstrap exits 0`, { output: bootstrap.out });
  assertNoSecrets(t, bootstrap.out, `${what} bootstrap`);
  t.comment(`${what}: kubeboot bootstrap under qemu-user took ${bootstrap.ms} ms`);
  t.equal(await whoami(plane, node.kubeletKubeconfig), `system:node:${name}`, `${what}: the credential authenticates as the node`);
  const after = await kubeboot(['check', '--config', node.config]);
  t.equal(after.code, 0, `${what}: check after bootstrap exits 0`, { output: after.out });
}

if (toolsOrSkip(t, [QEMU, 'debootstrap', 'rpm2cpio', 'cpio', ...buildTools], true)) {
  buildPackages();
  const sysroot = cachedArm64Sysroot();
  const plane = await controlPlaneOrSkip(t, { name: 'arm64' });
  if (plane) {
    await t.test('the arm64 .deb runs --version, check and a full bootstrap under emulation', async (t) => {
      await provePackage(t, plane, 'arm64 deb', extractDeb(t, packages.debArm64), sysroot);
    });
    await t.test('the aarch64 .rpm payload runs --version, check and a full bootstrap under emulation', async (t) => {
      const tree = mkdtempSync(join(tmpdir(), 'kubeboot-rpm-'));
      t.teardown(() => rmSync(tree, { recursive: true, force: true }));
      const r = run('sh', ['-c', 'rpm2cpio "$0" | cpio -idm --quiet', packages.rpmAarch64], { cwd: tree });
      t.equal(r.status, 0, 'rpm2cpio | cpio unpacks the payload', { stderr: r.stderr });
      await provePackage(t, plane, 'aarch64 rpm', tree, sysroot);
    });
  }
}
