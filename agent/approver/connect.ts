/**
 * Where the approver's API client comes from: the kubeconfig when that file
 * exists (a control-plane node's unit), otherwise the pod's in-cluster
 * configuration (service-account token and CA under
 * /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST/PORT).
 */
import path from 'node:path';
import { InputError } from '../errors.js';
import { KubeClient, type ClientAuth } from '../kube/client.js';
import { parseBootstrapKubeconfig } from '../kubeconfig/parse.js';
import type { ReadFile } from '../read-optional.js';

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface ConnectInput {
  kubeconfig: string;
  env: Record<string, string | undefined>;
  readFile: ReadFile;
  /** For tests; the real one is SERVICE_ACCOUNT_DIR. */
  serviceAccountDir?: string;
}

export interface Connection {
  client: KubeClient;
  /** For the log: which configuration was used. */
  source: string;
}

export async function connect(input: ConnectInput): Promise<Connection> {
  const text = await input.readFile(input.kubeconfig);
  if (text !== null) {
    const kc = await parseBootstrapKubeconfig(input.kubeconfig, text, input.readFile);
    // Approving on the word of an unverified server, with our credential sent to it, is never right.
    if (kc.insecureSkipTlsVerify)
      throw new InputError(
        input.kubeconfig,
        'insecure-skip-tls-verify',
        'refused: the approver verifies the API server; give the cluster CA instead',
      );
    let credential: ClientAuth;
    if (kc.auth.kind === 'client-certificate')
      credential = { kind: 'client-certificate', certPem: kc.auth.certPem, keyPem: kc.auth.keyPem };
    else if (kc.tokenFile !== null) credential = { kind: 'token-file', path: kc.tokenFile };
    else credential = { kind: 'token', token: kc.auth.token };
    const endpoint = { server: kc.server, caPem: kc.caPem, tlsServerName: kc.tlsServerName, unsafeSkipTlsVerify: false };
    return { client: new KubeClient(endpoint, credential), source: input.kubeconfig };
  }
  const host = input.env.KUBERNETES_SERVICE_HOST;
  const port = input.env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) {
    throw new InputError(
      input.kubeconfig,
      '(file)',
      'not found, and KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are unset (not in a pod); set --kubeconfig',
    );
  }
  const dir = input.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const caFile = path.join(dir, 'ca.crt');
  const caPem = await input.readFile(caFile);
  if (caPem === null) throw new InputError(caFile, '(file)', 'not found (is a service account token mounted?)');
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return {
    client: new KubeClient({ server, caPem }, { kind: 'token-file', path: path.join(dir, 'token') }),
    source: `in-cluster (${dir})`,
  };
}
