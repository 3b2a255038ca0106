/**
 * `kubeboot check`: everything bootstrap would look at, nothing it would
 * change. One line per check; the exit code is the first failure's.
 */
import { existingCredential } from '../bootstrap/existing.js';
import { readOptional } from '../read-optional.js';
import type { Config } from '../config/types.js';
import { ExitCode, exitCodeOf } from '../errors.js';
import { identitiesFor } from '../identities.js';
import type { Logger } from '../log.js';
import { ApiError, KubeClient, type Credential, type Endpoint } from '../kube/client.js';
import { clusterOf } from '../bootstrap/flow.js';
import { caCertHash } from '../pki/pin.js';
import { whoAmI } from '../kube/whoami.js';
import { parseBootstrapKubeconfig } from '../kubeconfig/parse.js';
import { joinRequested, joinSource } from '../join/prepare.js';

interface Line {
  ok: boolean;
  what: string;
  detail: string;
  code?: number;
}

export async function runCheck(config: Config, logger: Logger, signal?: AbortSignal, out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const lines: Line[] = [{ ok: true, what: 'configuration', detail: `${config.configFile} (node name ${config.nodeName})` }];
  const now = new Date();
  const identities = identitiesFor(config);
  const kubelet = await existingCredential(identities[0]!, now, null);
  for (const identity of identities) {
    const e = identity === identities[0] ? kubelet : await existingCredential(identity, now, kubelet.cluster?.caPem ?? null);
    lines.push({ ok: e.usable, what: `${identity.name} credential`, detail: e.usable ? `valid until ${e.notAfter?.toISOString()}` : e.reason, code: ExitCode.other });
  }
  const allUsable = lines.every((l) => l.ok);

  let endpoint: Endpoint | null = kubelet.cluster;
  let credential: Credential | null = kubelet.usable && kubelet.certPem && kubelet.keyPem ? { kind: 'client-certificate', certPem: kubelet.certPem, keyPem: kubelet.keyPem } : null;
  let bootstrapFile: string | null = null;
  const text = await readOptional(config.bootstrapKubeconfig);
  // --server/--token stand in for a bootstrap kubeconfig that bootstrap would write.
  const joining = text === null && !allUsable && joinRequested(config);
  if (text === null && !joining) {
    lines.push({ ok: allUsable, what: 'bootstrap kubeconfig', detail: `${config.bootstrapKubeconfig} not present${allUsable ? ' (not needed: all credentials valid)' : ''}`, code: ExitCode.badInput });
  } else {
    try {
      const bootstrap = text !== null ? await parseBootstrapKubeconfig(config.bootstrapKubeconfig, text, readOptional) : await joinSource(config);
      lines.push({ ok: true, what: 'bootstrap kubeconfig', detail: `${bootstrap.file}: server ${bootstrap.server}, ${bootstrap.auth.kind}${bootstrap.caPem ? '' : ', CA to be discovered'}` });
      // The same CA resolution bootstrap uses (pins, discovery); it sends no token and writes nothing.
      const cluster = await clusterOf(bootstrap, config, { logger, now: () => new Date(), ...(signal ? { signal } : {}) });
      lines.push({ ok: true, what: 'cluster CA', detail: bootstrap.caPem ? 'from the bootstrap kubeconfig' : `discovered from kube-public/cluster-info and pinned (${caCertHash(cluster.caPem)})` });
      endpoint = cluster;
      bootstrapFile = bootstrap.file;
      credential = bootstrap.auth.kind === 'client-certificate' ? { kind: 'client-certificate', certPem: bootstrap.auth.certPem, keyPem: bootstrap.auth.keyPem } : { kind: 'token', token: bootstrap.auth.token };
    } catch (err) {
      lines.push({ ok: false, what: 'bootstrap kubeconfig', detail: (err as Error).message, code: exitCodeOf(err) });
    }
  }

  if (endpoint && credential) {
    const client = new KubeClient(endpoint, credential);
    try {
      const user = await whoAmI(client, signal);
      lines.push({ ok: true, what: 'API server', detail: `${endpoint.server} reachable; authenticated as ${user.username} [${user.groups.join(', ')}]` });
    } catch (err) {
      const rejected = bootstrapFile !== null && err instanceof ApiError && err.status === 401;
      lines.push({
        ok: false,
        what: 'API server',
        detail: rejected ? `${bootstrapFile}: the API server rejected the bootstrap credential (401 Unauthorized): it is expired, deleted or mistyped` : (err as Error).message,
        code: rejected ? ExitCode.badInput : ExitCode.other,
      });
    } finally {
      await client.close();
    }
  }

  for (const line of lines) out.write(`${line.ok ? 'ok  ' : 'FAIL'} ${line.what}: ${line.detail}\n`);
  // Missing credentials are what bootstrap is for: check fails only when bootstrap could not fix them.
  const failures = lines.filter((l) => !l.ok && !(l.what.endsWith('credential') && (text !== null || joining)));
  return failures.length === 0 ? ExitCode.ok : (failures[0]!.code ?? ExitCode.other);
}
