/**
 * `kubeboot ca-rotation publish|status|retire`: the cluster admin's side of
 * a CA rotation (docs/ca-rotation.md). publish puts a CA bundle (and, with
 * --signer-ca-hash, the CA the signer now issues under) in
 * kube-public/cluster-info; status shows how many nodes trust it and hold
 * certificates under the signer, and which lag and why; retire publishes the
 * final bundle only once every node is ready for it.
 */
import { ExitCode, InputError, KubebootError } from '../errors.js';
import { adminClient, explainAdminError, type Admin } from '../join/admin.js';
import { bundleFromFile, parseSignerPin, publishTrust, readPublished, rotationProgress, type Progress } from '../join/ca-rotation.js';
import { readOptional } from '../read-optional.js';
import { systemClock } from '../time/clock.js';
import type { Given } from './token.js';

const USAGE = 'ca-rotation publish BUNDLE.pem [--signer-ca-hash sha256:HEX] | status | retire BUNDLE.pem';

export async function runCaRotation(
  positionals: string[],
  given: Given,
  output: 'text' | 'json',
  env: Record<string, string | undefined>,
): Promise<number> {
  const [action, ...rest] = positionals;
  const expect = (n: number) => {
    if (rest.length !== n) throw new InputError('command line', 'arguments', `usage: kubeboot ${USAGE}`);
  };
  if (action !== 'publish' && action !== 'status' && action !== 'retire')
    throw new InputError('command line', 'arguments', `usage: kubeboot ${USAGE}`);
  const signerFlag = typeof given['signer-ca-hash'] === 'string' ? parseSignerPin(given['signer-ca-hash']) : null;
  const admin = await adminClient(typeof given.kubeconfig === 'string' ? given.kubeconfig : undefined, env);
  const doing = (what: string) => (err: unknown) => {
    throw explainAdminError(err, admin, what);
  };
  try {
    switch (action) {
      case 'publish': {
        expect(1);
        const bundle = await readBundle(rest[0]!);
        await publishTrust(admin.client, bundle, signerFlag).catch(doing('update kube-public/cluster-info'));
        process.stdout.write(
          `published ${bundle.cas.length} CA(s) in kube-public/cluster-info${signerFlag ? `; signer CA ${signerFlag}` : ''}; follow with: kubeboot ca-rotation status\n`,
        );
        return ExitCode.ok;
      }
      case 'status': {
        expect(0);
        const progress = await current(admin);
        process.stdout.write(output === 'json' ? `${JSON.stringify(progress, null, 2)}\n` : renderProgress(progress));
        return progress.ready ? ExitCode.ok : ExitCode.other;
      }
      case 'retire': {
        expect(1);
        const bundle = await readBundle(rest[0]!);
        const published = await readPublished(admin.client, systemClock.now()).catch(doing('read kube-public/cluster-info'));
        if (published.signerPin === null || !bundle.pins.includes(published.signerPin))
          throw new KubebootError(
            `${rest[0]}: retiring needs the signer CA published first (kubeboot ca-rotation publish BUNDLE --signer-ca-hash …) and in this bundle`,
            ExitCode.badInput,
          );
        const progress = await rotationProgress(admin.client, published.bundle, published.signerPin).catch(doing('list Nodes'));
        if (!progress.ready) {
          process.stdout.write(renderProgress(progress));
          throw new KubebootError(
            `not retiring: ${progress.nodes.filter((n) => n.lag !== null).length} node(s) are not ready (above); the old CA stays published`,
          );
        }
        await publishTrust(admin.client, bundle, published.signerPin).catch(doing('update kube-public/cluster-info'));
        process.stdout.write(
          `published the final bundle (${bundle.cas.length} CA(s)); once \`kubeboot ca-rotation status\` shows every node on it, take the old CA out of the control plane's flags\n`,
        );
        return ExitCode.ok;
      }
      default:
        throw new InputError('command line', 'arguments', `usage: kubeboot ${USAGE}`);
    }
  } finally {
    await admin.client.close();
  }
}

async function readBundle(file: string) {
  const text = await readOptional(file);
  if (text === null) throw new InputError(file, 'CA bundle', 'file not found');
  return bundleFromFile(file, text, systemClock.now());
}

async function current(admin: Admin): Promise<Progress> {
  try {
    const published = await readPublished(admin.client, systemClock.now());
    return await rotationProgress(admin.client, published.bundle, published.signerPin);
  } catch (err) {
    throw explainAdminError(err, admin, 'read kube-public/cluster-info and the Nodes');
  }
}

function renderProgress(p: Progress): string {
  const lines = [
    `${p.trusting}/${p.nodes.length} node(s) trust and use the published CA bundle; ${p.underSigner}/${p.nodes.length} hold certificates under the signer CA`,
  ];
  for (const n of p.nodes) if (n.lag) lines.push(`  ${n.name}: ${n.lag}`);
  lines.push(p.ready ? 'every node is ready for the next step' : 'not every node is ready yet');
  return `${lines.join('\n')}\n`;
}
