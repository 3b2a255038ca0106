/**
 * Joining with --server, --token (or --token-file) and --ca-cert-hash
 * instead of a hand-written bootstrap kubeconfig: the CA comes from pinned
 * cluster-info discovery (as `kubeadm join --discovery-token` does), then
 * kubeboot writes the bootstrap kubeconfig itself and the usual flow takes
 * over — including deleting that kubeconfig (and the token file) once the
 * node's own credential is proven.
 *
 * Whether to join (no bootstrap kubeconfig, the operator's or an earlier
 * run's, and no usable kubelet credential) is decided in bootstrap/pass.ts.
 */
import path from 'node:path';
import type { Dispatcher } from 'undici';
import type { Config } from '../config/types.js';
import { ExitCode, InputError, KubebootError, TokenFileGoneError } from '../errors.js';
import { discoverClusterCa } from '../kube/discovery.js';
import { seedFloor } from '../trust/floor.js';
import { classifyToken, type BootstrapAuth, type BootstrapKubeconfig } from '../kubeconfig/parse.js';
import { renderBootstrapKubeconfig } from '../kubeconfig/render.js';
import type { Logger } from '../log.js';
import { readOptional, type ReadFile } from '../read-optional.js';
import type { WriteObserver } from '../store/atomic.js';
import { storeOf, type Store } from '../store/store.js';
import type { Clock } from '../time/clock.js';

export interface JoinDeps {
  logger: Logger;
  clock: Clock;
  signal?: AbortSignal | undefined;
  dispatcher?: Dispatcher | undefined;
  /** Where the token file is read and the bootstrap kubeconfig written; unset, the files on disk. */
  store?: Store | undefined;
  observer?: WriteObserver | undefined;
}

const SETTINGS = 'configuration';

/**
 * Discovers the CA for the join settings (pinned), writes the bootstrap
 * kubeconfig, and returns it as reading it back would: the caller keeps it
 * in memory rather than reading, parsing and pinning it again. Null when the
 * token file is already gone.
 */
export async function joinCluster(config: Config, deps: JoinDeps): Promise<BootstrapKubeconfig | null> {
  const store = storeOf(deps);
  let source: JoinSource;
  try {
    source = await joinSource(config, store.read);
  } catch (err) {
    if (!(err instanceof TokenFileGoneError)) throw err;
    // A node whose credential lapsed long after its join needs a new token;
    // the daemon says so on /readyz rather than refusing to start.
    deps.logger.warn(`join: ${err.message}`);
    return null;
  }
  deps.logger.info(`join: discovering the cluster CA from ${source.server} (kube-public/cluster-info)`);
  const caPem = await discoverClusterCa({
    server: source.server,
    tlsServerName: null,
    tokenId: source.auth.tokenId,
    tokenSecret: source.auth.tokenSecret,
    pins: config.caCertHashes,
    unsafeSkipCaVerification: config.unsafeSkipCaVerification,
    timeoutMs: config.waitTimeout * 1000,
    logger: deps.logger,
    clock: deps.clock,
    ...(deps.signal ? { signal: deps.signal } : {}),
    ...(deps.dispatcher ? { dispatcher: deps.dispatcher } : {}),
    onVerified: async ({ caPem, signed }) => {
      await seedFloor({ store, stateDir: config.stateDir, logger: deps.logger, caPem, signed, now: deps.clock.now() });
    },
  });
  const text = renderBootstrapKubeconfig({
    server: source.server,
    caPem,
    credential: source.tokenFile !== null ? { tokenFile: source.tokenFile } : { token: source.auth.token },
  });
  await store.write(config.bootstrapKubeconfig, text, { dirMode: 0o755 });
  deps.logger.info(`join: wrote ${config.bootstrapKubeconfig} for token ${source.auth.tokenId}`);
  const dir = path.dirname(config.bootstrapKubeconfig);
  return {
    ...source,
    file: config.bootstrapKubeconfig,
    caPem,
    tokenFile: source.tokenFile === null ? null : path.resolve(dir, source.tokenFile),
  };
}

export function joinRequested(config: Config): boolean {
  return config.server !== null || config.token !== null || config.tokenFile !== null;
}

/** Incomplete or contradictory join settings; no I/O. */
export function checkJoinSettings(config: Config): void {
  const { server, token, tokenFile } = config;
  if (server === null)
    throw new InputError(SETTINGS, 'server (--server, KUBEBOOT_SERVER)', 'missing: a join token needs the API server URL');
  if (token === null && tokenFile === null)
    throw new InputError(SETTINGS, 'token (--token, --token-file, KUBEBOOT_TOKEN)', `missing: joining ${server} needs a bootstrap token`);
  if (token !== null && tokenFile !== null)
    throw new InputError(SETTINGS, 'tokenFile (--token-file)', 'cannot be combined with token; give one');
}

export type JoinSource = BootstrapKubeconfig & { auth: Extract<BootstrapAuth, { kind: 'bootstrap-token' }> };

/**
 * The join settings as a bootstrap kubeconfig held in memory, without a CA
 * (pinned discovery supplies it): what `check` examines and `joinCluster` writes.
 * `read` reads the token file.
 */
export async function joinSource(config: Config, read: ReadFile = readOptional): Promise<JoinSource> {
  checkJoinSettings(config);
  const { server, token, tokenFile } = config;
  const secret = token ?? (await read(tokenFile as string))?.trim() ?? null;
  if (secret === null) throw new TokenFileGoneError(tokenFile as string);
  if (config.caCertHashes.length === 0 && !config.unsafeSkipCaVerification) {
    throw new KubebootError(
      `joining ${server as string} needs --ca-cert-hash sha256:… (kubeboot user-data and join-command print it) to trust the CA it discovers; --unsafe-skip-ca-verification trusts any`,
      ExitCode.badInput,
    );
  }

  const auth = classifyToken(secret);
  const where = token !== null ? 'token (--token, KUBEBOOT_TOKEN)' : (tokenFile as string);
  if ('problem' in auth) throw new InputError(SETTINGS, where, auth.problem);
  if (auth.kind !== 'bootstrap-token') throw new InputError(SETTINGS, where, 'not a bootstrap token (want [a-z0-9]{6}.[a-z0-9]{16})');
  return {
    file: JOIN_SETTINGS,
    server: (server as string).replace(/\/$/, ''),
    caPem: null,
    insecureSkipTlsVerify: false,
    tlsServerName: null,
    auth,
    tokenFile,
  };
}

/** How messages name the join settings in place of a kubeconfig file. */
export const JOIN_SETTINGS = 'join settings (--server, --token/--token-file)';
