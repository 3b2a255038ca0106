/**
 * `kubeboot check`: everything bootstrap would look at, nothing it would
 * change. One line per check; the exit code is the first failure's.
 */
import { allOf, assessNode, isNodeCredential } from '../credential/assess.js';
import { dryRunPlan, findBootstrap, type FoundBootstrap } from '../bootstrap/pass.js';
import { bootstrapRequester, clusterOf, explainBootstrapFailure, nodeRequester, type Requester } from '../credential/requester.js';
import { readOptional, readOptionalOrProblem } from '../read-optional.js';
import type { Config } from '../config/types.js';
import { ExitCode, exitCodeOf } from '../errors.js';
import type { Logger } from '../log.js';
import { caCertHash } from '../pki/pin.js';
import { whoAmI } from '../kube/whoami.js';
import { checkJoinSettings, joinRequested, joinSource } from '../bootstrap/join.js';
import { systemClock } from '../time/clock.js';
import { terminalLines } from '../text.js';
import { kubeletRenewer, tpmRenewalProblem } from '../renewal/owner.js';
import { identify, tpmLocationOf, withTpm } from '../tpm/identify.js';

interface Line {
  ok: boolean;
  /** A missing credential the pass would ask for: work to do, not a failure. */
  fixable?: boolean;
  what: string;
  detail: string;
  code?: number;
}

export async function runCheck(
  config: Config,
  logger: Logger,
  signal?: AbortSignal,
  out: NodeJS.WritableStream = process.stdout,
): Promise<number> {
  const lines: Line[] = [{ ok: true, what: 'configuration', detail: `${config.configFile} (node name ${config.nodeName})` }];
  const node = await assessNode(config, systemClock.now());
  // Read first: a missing credential nothing could fix is bad input, exit 2.
  let found: FoundBootstrap = { kind: 'absent' };
  let unreadable: Error | null = null;
  try {
    found = await findBootstrap(config, readOptional);
  } catch (err) {
    unreadable = err as Error;
  }
  // Who would ask for what is the pass's decision (bootstrap/pass.ts), not re-derived here.
  const { asker } = dryRunPlan(config, node, unreadable === null ? found : null);
  const present = found.kind !== 'absent';
  const joining = [...asker.values()].includes('join');
  for (const a of allOf(node)) {
    const fixable = (asker.get(a) ?? null) !== null;
    lines.push({
      ok: a.state === 'usable',
      fixable,
      what: `${a.identity.name} credential`,
      detail: a.state === 'usable' ? `valid until ${a.notAfter.toISOString()}` : a.reason,
      code: fixable ? ExitCode.other : ExitCode.badInput,
    });
  }

  // Join settings the pass does not use are still checked first, as openPass checks them.
  if (!joining && joinRequested(config)) {
    try {
      checkJoinSettings(config);
    } catch (err) {
      lines.push({ ok: false, what: 'join settings', detail: (err as Error).message, code: exitCodeOf(err) });
    }
  }

  // Who would ask, as the pass would ask: the bootstrap credential once it checks out, else the kubelet's own.
  let requester: Requester | null = null;
  if (unreadable !== null) {
    lines.push({ ok: false, what: 'bootstrap kubeconfig', detail: unreadable.message, code: exitCodeOf(unreadable) });
  } else if (!present && !joining) {
    const missing = [...asker.keys()];
    const why =
      missing.length === 0
        ? ' (not needed: all credentials valid)'
        : missing.every((a) => asker.get(a) === 'kubelet')
          ? ` (not needed: the kubelet credential asks for ${missing.map((a) => `${a.identity.name}'s`).join(', ')})`
          : '';
    lines.push({
      ok: why !== '',
      what: 'bootstrap kubeconfig',
      detail: `${config.bootstrapKubeconfig} not present${why}`,
      code: ExitCode.badInput,
    });
  } else {
    try {
      if (found.kind === 'invalid') throw found.error;
      const bootstrap = found.kind === 'kubeconfig' ? found.bootstrap : await joinSource(config);
      lines.push({
        ok: true,
        what: 'bootstrap kubeconfig',
        detail: `${bootstrap.file}: server ${bootstrap.server}, ${bootstrap.auth.kind}${bootstrap.caPem ? '' : ', CA to be discovered'}`,
      });
      // The same CA resolution bootstrap uses (pins, discovery); it writes nothing, and sends the token only as discovery does (a SelfSubjectReview over TLS pinned to the CA, while cluster-info has no signature for it).
      const cluster = await clusterOf(bootstrap, config, { logger, signal });
      lines.push({
        ok: true,
        what: 'cluster CA',
        detail: bootstrap.caPem
          ? 'from the bootstrap kubeconfig'
          : `discovered from kube-public/cluster-info and pinned (${caCertHash(cluster.caPem)})`,
      });
      requester = bootstrapRequester(bootstrap, cluster);
    } catch (err) {
      lines.push({ ok: false, what: 'bootstrap kubeconfig', detail: (err as Error).message, code: exitCodeOf(err) });
    }
  }

  requester ??= isNodeCredential(node.kubelet) ? nodeRequester(node.kubelet) : null;
  if (requester) {
    const { client, cluster } = requester;
    try {
      const user = await whoAmI(client, signal);
      lines.push({
        ok: true,
        what: 'API server',
        detail: `${cluster.server} reachable; authenticated as ${user.username} [${user.groups.join(', ')}]`,
      });
    } catch (err) {
      // A 401 with the bootstrap credential is worded, and given its exit code, where the pass words it.
      const explained = explainBootstrapFailure(err, requester.bootstrap);
      lines.push({ ok: false, what: 'API server', detail: (explained as Error).message, code: exitCodeOf(explained) });
    } finally {
      await client.close();
    }
  }

  lines.push(...(await tpmLines(config)));

  // A missing credential that bootstrap will obtain is work to do, not a failure.
  // A detail may hold the API server's words: a Status message, the user and groups SelfSubjectReview names.
  out.write(terminalLines(lines.map((line) => `${line.ok ? 'ok  ' : line.fixable ? 'todo' : 'FAIL'} ${line.what}: ${line.detail}`)));
  // Missing credentials are what bootstrap is for: check fails only when bootstrap could not fix them.
  const failures = lines.filter((l) => !l.ok && !l.fixable);
  return failures.length === 0 ? ExitCode.ok : (failures[0]!.code ?? ExitCode.other);
}

/**
 * With --tpm: the TPM answers and makes the AK the inventory must name
 * (`kubeboot node enroll`), and the kubelet does not renew its own client
 * certificate, whose CSRs would carry no evidence and be refused.
 */
async function tpmLines(config: Config): Promise<Line[]> {
  const where = tpmLocationOf(config.tpm);
  if (where === null) return [];
  const lines: Line[] = [];
  try {
    const id = await withTpm(where, (tpm) => identify(tpm, systemClock.now()));
    lines.push({
      ok: true,
      what: 'TPM',
      detail: `${id.device}: kubelet client CSRs carry a quote by AK ${id.akName} (ek-sha256 ${id.ekHash}); the inventory must name it (kubeboot node enroll ${config.nodeName} --tpm-ak …)`,
    });
  } catch (err) {
    lines.push({ ok: false, what: 'TPM', detail: (err as Error).message, code: exitCodeOf(err) });
  }
  const file = config.kubelet.configFile;
  const problem = tpmRenewalProblem(config.tpm, kubeletRenewer(config.kubelet.renewal, file, await readOptionalOrProblem(file)));
  if (problem !== null) lines.push({ ok: false, what: 'kubelet renewal', detail: problem, code: ExitCode.badInput });
  return lines;
}
