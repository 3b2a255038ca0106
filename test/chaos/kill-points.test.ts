// kill -9 at random moments of a bootstrap and of a renewal, against the real
// control plane. After every kill the files on disk must still make sense
// (no link to a missing or torn credential, no kubeconfig pointing nowhere),
// and one clean rerun must finish with exactly one CSR per attempt chain and
// no temp file left behind. `npm run test:chaos` runs many more points.
import { execFile } from 'node:child_process';
import { lstat, readdir, readFile, readlink, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { parseClientKubeconfig } from '../../agent/kubeconfig/parse.js';
import { keyMatchesCertificate, parsePrivateKey } from '../../agent/pki/keys.js';
import { readOptional } from '../../agent/read-optional.js';
import { splitCredential } from '../../agent/store/cert-store.js';
import type { KubeObject } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { handToken, kubeboot, nodeLayout, startKubeboot, type NodeLayout } from '../support/kubeboot.js';
import { prng } from '../support/prng.js';

const run = promisify(execFile);
const POINTS = Number(process.env.KUBEBOOT_CHAOS_POINTS ?? 6);

const seed = Number(process.env.KUBEBOOT_CHAOS_SEED ?? Date.now() % 100_000);
const random = prng(seed);
t.comment(`chaos seed ${seed} (replay with KUBEBOOT_CHAOS_SEED=${seed}), ${POINTS} kill points per phase`);

/** What must hold on disk at any instant: the link resolves to a whole credential whose key fits, and the kubeconfig points at it. */
async function assertConsistent(t: Test, node: NodeLayout, when: string): Promise<void> {
  const link = join(node.kubeletCertDir, 'kubelet-client-current.pem');
  const linkStat = await lstat(link).catch(() => null);
  if (linkStat) {
    t.ok(linkStat.isSymbolicLink(), `${when}: -current.pem is a link`);
    const target = await readlink(link);
    const credential = splitCredential(await readFile(target, 'utf8').catch(() => ''));
    t.ok(credential, `${when}: the link points at a complete credential (${target})`);
    if (credential)
      t.ok(keyMatchesCertificate(await parsePrivateKey(credential.keyPem), credential.certPem), `${when}: its key fits its certificate`);
  }
  const kubeconfig = await readOptional(node.kubeletKubeconfig);
  if (kubeconfig !== null) {
    const parsed = await parseClientKubeconfig(node.kubeletKubeconfig, kubeconfig, readOptional).catch((err: Error) => err);
    t.notOk(parsed instanceof Error, `${when}: kubelet.conf parses, with the credential it names present`);
  }
}

async function tempFiles(dirs: string[]): Promise<string[]> {
  const found: string[] = [];
  for (const dir of dirs)
    for (const name of await readdir(dir).catch(() => [] as string[])) if (name.includes('.tmp-')) found.push(join(dir, name));
  return found;
}

const plane = await controlPlaneOrSkip(t, { name: 'chaos' });
if (plane) {
  const kubectl = plane.kubectlPath!;
  const whoami = async (kubeconfig: string) =>
    JSON.parse((await run(kubectl, ['--kubeconfig', kubeconfig, 'auth', 'whoami', '-o', 'json'])).stdout).status.userInfo
      .username as string;
  const csrsOf = async (node: string) => (await plane.admin.listCsrs()).filter((c) => csrNode(c) === node);

  /** How long one uninterrupted run takes, so kill points spread over the whole of it. */
  async function span(args: (node: NodeLayout) => string[], prepare: (node: NodeLayout) => Promise<void>, name: string): Promise<number> {
    const node = await nodeLayout(t.testdir(), name);
    await prepare(node);
    const started = performance.now();
    const result = await kubeboot(t, args(node));
    if (result.code !== 0) throw new Error(`the reference run failed: ${result.stderr}`);
    return performance.now() - started;
  }

  const bootstrapArgs = (node: NodeLayout) => ['bootstrap', '--config', node.config];
  const renewArgs = (node: NodeLayout) => ['renew', '--config', node.config];
  const fresh = async (node: NodeLayout) => void (await handToken(plane, node, 'data'));
  const bootstrapped = async (node: NodeLayout) => {
    await handToken(plane, node, 'data');
    const first = await kubeboot(t, bootstrapArgs(node));
    if (first.code !== 0) throw new Error(first.stderr);
  };

  for (const phase of [
    { name: 'bootstrap', args: bootstrapArgs, prepare: fresh, csrs: 1 },
    { name: 'renewal', args: renewArgs, prepare: bootstrapped, csrs: 2 },
  ]) {
    t.test(
      `kill -9 at ${POINTS} random moments of a ${phase.name}: files stay usable, one rerun finishes with no second CSR`,
      async (t) => {
        const whole = await span(phase.args, phase.prepare, `chaos-${phase.name}-ref`);
        for (let i = 0; i < POINTS; i++) {
          const name = `chaos-${phase.name}-${i}`;
          const dir = join(t.testdir(), String(i));
          const node = await nodeLayout(dir, name);
          await phase.prepare(node);
          const link = join(node.kubeletCertDir, 'kubelet-client-current.pem');
          const before = await readlink(link).catch(() => null);
          const killAfter = Math.round(random() * whole * 1.2);
          const victim = startKubeboot(phase.args(node));
          const timer = setTimeout(() => victim.child.kill('SIGKILL'), killAfter);
          const ended = await victim.done;
          clearTimeout(timer);
          const when = `${phase.name} killed at ${killAfter} ms (${ended.signal ?? `exit ${ended.code}`})`;
          await assertConsistent(t, node, when);
          // A renewal that finished before the kill (new link, no pending key) makes the rerun a second, legitimate renewal.
          const renewedBeforeKill =
            phase.name === 'renewal' &&
            (await readlink(link).catch(() => null)) !== before &&
            (await readOptional(join(node.stateDir, 'kubelet.key.pending'))) === null;

          const rerun = await kubeboot(t, phase.args(node));
          t.equal(rerun.code, 0, `${when}: the rerun succeeds`);
          t.equal(await whoami(node.kubeletKubeconfig), `system:node:${name}`, `${when}: kubelet.conf works`);
          const csrs = (await csrsOf(name)).length;
          t.equal(
            csrs,
            phase.csrs + (renewedBeforeKill ? 1 : 0),
            `${when}: ${csrs} CSR(s): the rerun adopted an interrupted attempt's CSR instead of filing another`,
          );
          t.same(await tempFiles([node.kubeletCertDir, node.stateDir, dir]), [], `${when}: no temp file left after the rerun`);
          await stat(node.bootstrapKubeconfig).then(
            () => t.fail(`${when}: the bootstrap kubeconfig is gone after the rerun`),
            () => t.pass(`${when}: the bootstrap kubeconfig is gone after the rerun`),
          );
        }
      },
    );
  }
}

/** The node a CSR is for, from its request's CN (system:node:<name>). */
function csrNode(csr: KubeObject): string {
  const der = Buffer.from(
    Buffer.from(String(csr.spec?.request ?? ''), 'base64')
      .toString()
      .replace(/-----[^-]+-----/g, '')
      .replace(/\s+/g, ''),
    'base64',
  );
  const at = der.indexOf(Buffer.from([0x06, 0x03, 0x55, 0x04, 0x03]));
  if (at < 0) return '';
  const cn = der.subarray(at + 7, at + 7 + der[at + 6]!).toString('utf8');
  return cn.startsWith('system:node:') ? cn.slice('system:node:'.length) : '';
}
