/**
 * The cluster admin's API client, found the way kubectl finds it:
 * --kubeconfig, else the first existing file in KUBECONFIG, else
 * ~/.kube/config. Failures become one line with an exit code: no kubeconfig
 * or a bad one is input (2), an unreachable or refusing cluster is 1.
 */
import os from 'node:os';
import path from 'node:path';
import type { Given } from '../config/load.js';
import { ApiError, ExitCode, InputError, KubebootError, TransportError } from '../errors.js';
import { KubeClient } from '../kube/client.js';
import { parseBootstrapKubeconfig, type BootstrapKubeconfig } from '../kubeconfig/parse.js';
import { caCertHash } from '../pki/pin.js';
import { readOptional } from '../read-optional.js';

export interface Admin {
  client: KubeClient;
  kubeconfig: BootstrapKubeconfig;
}

/** Which file kubectl would read. Merging several KUBECONFIG files is not supported: the first existing one is used. */
export async function findAdminKubeconfig(
  flag: string | undefined,
  env: Record<string, string | undefined>,
  home = os.homedir(),
): Promise<{ file: string; text: string }> {
  if (flag !== undefined) {
    const file = path.resolve(flag);
    const text = await readOptional(file);
    if (text === null) throw new InputError('command line', '--kubeconfig', `file not found: ${file}`);
    return { file, text };
  }
  const candidates = (env.KUBECONFIG ?? '').split(path.delimiter).filter((p) => p !== '');
  for (const file of candidates) {
    const text = await readOptional(path.resolve(file));
    if (text !== null) return { file: path.resolve(file), text };
  }
  const fallback = path.join(home, '.kube', 'config');
  const text = candidates.length === 0 ? await readOptional(fallback) : null;
  if (text !== null) return { file: fallback, text };
  const looked = candidates.length > 0 ? `KUBECONFIG (${candidates.join(path.delimiter)})` : fallback;
  throw new KubebootError(`no admin kubeconfig: nothing at ${looked}; pass --kubeconfig`, ExitCode.badInput);
}

export async function adminClient(flag: string | undefined, env: Record<string, string | undefined>): Promise<Admin> {
  const { file, text } = await findAdminKubeconfig(flag, env);
  const kubeconfig = await parseBootstrapKubeconfig(file, text, readOptional);
  // A bootstrap token minted through an unverified connection may go to anyone.
  if (kubeconfig.insecureSkipTlsVerify)
    throw new InputError(
      file,
      'insecure-skip-tls-verify',
      'refused: kubeboot verifies the API server; give the cluster CA in this kubeconfig instead',
    );
  const credential =
    kubeconfig.auth.kind === 'client-certificate'
      ? ({ kind: 'client-certificate', certPem: kubeconfig.auth.certPem, keyPem: kubeconfig.auth.keyPem } as const)
      : ({ kind: 'token', token: kubeconfig.auth.token } as const);
  const client = new KubeClient(
    { server: kubeconfig.server, caPem: kubeconfig.caPem, tlsServerName: kubeconfig.tlsServerName, unsafeSkipTlsVerify: false },
    credential,
  );
  return { client, kubeconfig };
}

/** One line for the operator: which cluster, what went wrong, what to check. */
export function explainAdminError(err: unknown, admin: Admin, doing: string): unknown {
  const where = `${admin.kubeconfig.server} (from ${admin.kubeconfig.file})`;
  if (err instanceof TransportError)
    return new KubebootError(`cannot reach the cluster at ${where} to ${doing}: ${err.message}`, ExitCode.other);
  if (err instanceof ApiError && err.status === 401)
    return new KubebootError(
      `the cluster at ${where} rejected the admin credential (401 Unauthorized) while trying to ${doing}`,
      ExitCode.other,
    );
  // The API's message names the verb, resource and namespace the user lacks.
  if (err instanceof ApiError && err.status === 403)
    return new KubebootError(`forbidden to ${doing} at ${where}: ${err.message}`, ExitCode.other);
  return err;
}

/** Opens the admin client (--kubeconfig in `given`), runs `act`, closes it, and words API failures as one line. */
export async function withAdmin<T>(
  given: Given,
  env: Record<string, string | undefined>,
  doing: string,
  act: (admin: Admin) => Promise<T>,
): Promise<T> {
  const admin = await adminClient(typeof given.kubeconfig === 'string' ? given.kubeconfig : undefined, env);
  try {
    return await act(admin);
  } catch (err) {
    throw explainAdminError(err, admin, doing);
  } finally {
    await admin.client.close();
  }
}

/** The pin of the CA the admin kubeconfig trusts: what a joining node is told to pin. */
export function adminCaPin(admin: Admin): string {
  if (admin.kubeconfig.caPem === null) {
    throw new KubebootError(
      `${admin.kubeconfig.file}: names no certificate authority to pin; pass --ca-cert-hash sha256:…`,
      ExitCode.badInput,
    );
  }
  return caCertHash(admin.kubeconfig.caPem);
}

/** The pins join commands and user-data carry unless told otherwise: the admin kubeconfig's CA, when it names one. */
export function defaultJoinPins(admin: Admin): string[] {
  return admin.kubeconfig.caPem === null ? [] : [caCertHash(admin.kubeconfig.caPem)];
}

/** What installs kubeboot's records (and the approver's RBAC on them). */
export { MANIFESTS_COMMAND } from '../records/requests.js';
