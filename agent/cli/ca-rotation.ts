/**
 * `kubeboot ca-rotation publish|status|retire`: the cluster admin's side of
 * a CA rotation (docs/ca-rotation.md). publish puts a CA bundle (and, with
 * --signer-ca-hash, the CA the signer now issues under) in
 * kube-public/cluster-info; status shows how many nodes trust it and hold
 * certificates under the signer, and which lag and why; retire publishes the
 * final bundle only once every node is ready for it.
 */
import { ExitCode, InputError, KubebootError } from '../errors.js';
import { adminClient, defaultJoinPins, explainAdminError, type Admin } from '../admin/connect.js';
import { createPrivateKey, type KeyObject } from 'node:crypto';
import type { Given } from '../config/load.js';
import { parseDuration } from '../config/values.js';
import {
  bundleFromFile,
  parseSignerPin,
  publishedProgress,
  publishTrust,
  reissueCount,
  retireCa,
  type Progress,
  type Publication,
} from '../admin/ca-rotation.js';
import { readOptional } from '../read-optional.js';
import { terminalJson, terminalLines } from '../text.js';
import { systemClock } from '../time/clock.js';

const USAGE =
  'ca-rotation publish BUNDLE.pem --ca-key CA.key [--signer-ca-hash sha256:HEX] [--valid-for DURATION] [--drop-join-ca] | status | retire BUNDLE.pem --ca-key CA.key [--skip-node NAME]...';
/** How long nodes accept a signed change by default: a rotation step is hours; a node away longer waits for a newer one. */
const DEFAULT_VALID_FOR_S = 7 * 24 * 3600;

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
  const explain = (err: unknown, what: string) => explainAdminError(err, admin, what);
  const doing = (what: string) => (err: unknown) => {
    throw explain(err, what);
  };
  try {
    switch (action) {
      case 'publish': {
        expect(1);
        const bundle = await readBundle(rest[0]!);
        const signing = await signingFlags(given, admin);
        const done = await publishTrust(admin.client, { ...signing, bundle, signerPin: signerFlag }).catch(
          doing('update kube-public/cluster-info'),
        );
        process.stdout.write(
          `published ${bundle.cas.length} CA(s) in kube-public/cluster-info${signerFlag ? `; signer CA ${signerFlag}` : ''}, signed by ${done.signedBy} (version ${done.version}); follow with: kubeboot ca-rotation status\n`,
        );
        warnDroppedJoinPins(done.droppedJoinPins);
        warnAhead(done.aheadOfClock, done.version);
        if (signerFlag !== null && done.signerMoved) {
          const count = await reissueCount(admin.client, signerFlag).catch(doing('list Nodes'));
          process.stdout.write(
            `the signer moves to ${signerFlag}: ${count.certificates} certificate(s) on ${count.nodes} node(s) are re-issued under it, each node at its slot in its re-issue window\n`,
          );
        }
        return ExitCode.ok;
      }
      case 'status': {
        expect(0);
        const progress = await current(admin);
        process.stdout.write(output === 'json' ? terminalJson(progress) : renderProgress(progress));
        return progress.ready ? ExitCode.ok : ExitCode.other;
      }
      case 'retire': {
        expect(1);
        const file = rest[0]!;
        const bundle = await readBundle(file);
        const skip = Array.isArray(given['skip-node']) ? given['skip-node'].filter((n): n is string => typeof n === 'string') : [];
        const outcome = await retireCa(
          admin.client,
          { bundle, file, now: systemClock.now(), skip },
          () => signingFlags(given, admin),
          explain,
        );
        if ('notReady' in outcome) {
          process.stdout.write(renderProgress(outcome.notReady));
          throw new KubebootError(
            `not retiring: ${outcome.notReady.nodes.filter((n) => n.lag !== null).length} node(s) are not ready (above); the old CA stays published`,
          );
        }
        const done = outcome.retired;
        warnSkipped(outcome.progress);
        process.stdout.write(
          `published the final bundle (${bundle.cas.length} CA(s)), signed by ${done.signedBy} (version ${done.version}); once \`kubeboot ca-rotation status\` shows every node on it, take the old CA out of the control plane's flags\n`,
        );
        warnDroppedJoinPins(done.droppedJoinPins);
        warnAhead(done.aheadOfClock, done.version);
        return ExitCode.ok;
      }
      default:
        throw new InputError('command line', 'arguments', `usage: kubeboot ${USAGE}`);
    }
  } finally {
    await admin.client.close();
  }
}

/**
 * --ca-key (read once, here; the key goes to the signature and nowhere else), --valid-for, --drop-join-ca,
 * and the pin join commands carry by default (join-command, user-data: the admin kubeconfig's CA).
 */
async function signingFlags(given: Given, admin: Admin): Promise<Omit<Publication, 'bundle' | 'signerPin'>> {
  const file = given['ca-key'];
  if (typeof file !== 'string' || file === '')
    throw new InputError(
      'command line',
      '--ca-key',
      'missing: give the private key of a CA the nodes trust now (kubeadm: /etc/kubernetes/pki/ca.key); nodes add no CA without its signature',
    );
  const text = await readOptional(file);
  if (text === null) throw new InputError(file, 'private key', 'file not found');
  let caKey: KeyObject;
  try {
    caKey = createPrivateKey(text);
  } catch {
    // Never the parser's words: they may quote the key.
    throw new InputError(file, 'private key', 'not an unencrypted PEM private key (PKCS#1, SEC1 or PKCS#8)');
  }
  let validFor = DEFAULT_VALID_FOR_S;
  if (given['valid-for'] !== undefined) {
    const parsed = parseDuration(given['valid-for']);
    if (!parsed.ok || parsed.value < 60) throw new InputError('command line', '--valid-for', parsed.ok ? 'at least 1m' : parsed.problem);
    validFor = parsed.value;
  }
  return {
    caKey,
    validForMs: validFor * 1000,
    joinPins: defaultJoinPins(admin),
    dropJoinCa: given['drop-join-ca'] === true,
    now: () => systemClock.now(),
  };
}

/** Loud, on stderr: each node retired without being waited for, and what it means for it. */
function warnSkipped(p: Progress): void {
  for (const n of p.nodes)
    if (n.skipped)
      process.stderr.write(
        terminalLines([
          `warning: NOT WAITED FOR: node ${n.name} (--skip-node)${n.lag ? `: it ${n.lag}` : ''}; a certificate it holds from the retired CA stops working once the control plane drops that CA, and its files may lose the API server's CA: re-join it if so`,
        ]),
      );
}

/** The statement published before claimed a version from the future: nodes refused it, and this one did not go past it. */
function warnAhead(ahead: number | null, version: number): void {
  if (ahead !== null)
    process.stderr.write(
      `warning: the statement published before carried version ${ahead}, further ahead of this clock than nodes accept (a CA key used outside \`kubeboot ca-rotation publish\`, or a wrong clock): published version ${version} (now) instead; if that key leaked, rotate that CA (docs/ca-rotation.md)
`,
    );
}

function warnDroppedJoinPins(pins: readonly string[]): void {
  if (pins.length > 0)
    process.stderr.write(
      `warning: the published bundle no longer carries ${pins.join(', ')}: join commands and user-data pinning it fail from now on; make new ones (kubeboot join-command, kubeboot user-data)\n`,
    );
}

async function readBundle(file: string) {
  const text = await readOptional(file);
  if (text === null) throw new InputError(file, 'CA bundle', 'file not found');
  return bundleFromFile(file, text, systemClock.now());
}

async function current(admin: Admin): Promise<Progress> {
  try {
    return await publishedProgress(admin.client, systemClock.now());
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
  return terminalLines(lines);
}
