/**
 * Where a node's join comes from, for `kubeboot user-data` and `kubeboot
 * join-command`: the server, the token and the CA pins, each from the flags
 * when given, else from the admin kubeconfig (a new token with
 * --create-token, made for the cluster's RBAC), and how the cluster runs
 * kube-proxy. The command renders what this decides.
 */
import { readFile } from 'node:fs/promises';
import type { Config } from '../config/types.js';
import type { Given } from '../config/load.js';
import { bootstrapTokenProblem } from '../config/values.js';
import { InputError } from '../errors.js';
import { adminCaPin, withAdmin, type Admin } from './connect.js';
import type { Finding, KubeProxyRun } from './cluster-side.js';
import { createTokenForCluster, finding, kubeProxyRunOf } from './cluster-requests.js';
import { bindingSpecFrom, tokenSpecFrom, type BindingFlags, type BindingSpec, type TokenFlags } from './token.js';
import { systemClock } from '../time/clock.js';

const CLI = 'command line';

/**
 * Server, token and pins: from the flags, else from the admin kubeconfig (and
 * a new token with --create-token, made for the cluster's RBAC). `expires`:
 * of a token created here (RFC 3339, null for never); undefined for a given
 * token. `kubeProxyRun`: how the cluster runs kube-proxy, null when every
 * value was given and the cluster was not asked.
 */
export async function joinValues(
  command: string,
  config: Config,
  given: Given,
  env: Record<string, string | undefined>,
): Promise<{
  server: string;
  token: string;
  pins: string[];
  expires?: string | null;
  binding: BindingSpec | null;
  kubeProxyRun: Finding<KubeProxyRun> | null;
  notes: string[];
}> {
  const create = given['create-token'] === true;
  const token = config.token ?? (config.tokenFile !== null ? await readTokenFile(config.tokenFile) : null);
  if (create && token !== null) throw new InputError(CLI, '--create-token', 'cannot be combined with --token or --token-file');
  if (!create && token === null)
    throw new InputError(CLI, '--token', 'missing: give --token, --token-file or KUBEBOOT_TOKEN, or --create-token');
  const tokenFlags = ['ttl', 'expiry', 'usages', 'groups', 'description', 'node', 'pool', 'max-nodes'].filter(
    (f) => given[f] !== undefined,
  );
  if (!create && tokenFlags.length > 0)
    throw new InputError(CLI, `--${tokenFlags[0] === 'expiry' ? 'no-expiry' : tokenFlags[0]}`, 'only with --create-token');
  // A description makes `kubeboot token list` say what the token was made for.
  const tokenSpec = create ? tokenSpecFrom({ description: `kubeboot ${command}`, ...(given as TokenFlags) }) : null;
  const binding = create ? bindingSpecFrom(given as BindingFlags) : null;
  const needAdmin = create || config.server === null || config.caCertHashes.length === 0;
  if (!needAdmin)
    return {
      server: (config.server as string).replace(/\/$/, ''),
      token: token as string,
      pins: config.caCertHashes,
      binding,
      kubeProxyRun: null,
      notes: [],
    };
  return withAdmin(given, env, create ? 'create a bootstrap token Secret in kube-system' : 'read the cluster', async (admin: Admin) => {
    const server = (config.server ?? admin.kubeconfig.server).replace(/\/$/, '');
    const pins = config.caCertHashes.length > 0 ? config.caCertHashes : [adminCaPin(admin)];
    const kubeProxyRun = await finding(() => kubeProxyRunOf(admin));
    if (tokenSpec === null) return { server, token: token as string, pins, binding, kubeProxyRun, notes: [] };
    const created = await createTokenForCluster(admin, tokenSpec, systemClock.now(), binding);
    return { server, token: created.token.token, pins, expires: created.summary.expires, binding, kubeProxyRun, notes: created.notes };
  });
}

/** The token from `file`, checked as --token is: a malformed one would give user-data that can never join. */
async function readTokenFile(file: string): Promise<string> {
  let token: string;
  try {
    token = (await readFile(file, 'utf8')).trim();
  } catch (err) {
    throw new InputError(CLI, '--token-file', `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const problem = bootstrapTokenProblem(token);
  if (problem !== null) throw new InputError(file, 'token', problem);
  return token;
}
