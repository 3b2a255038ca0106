// Which CA a node trusts for its bootstrap (requester.ts clusterOf), as a
// table over what the bootstrap kubeconfig gives (a CA or not, TLS
// verification off or not, its credential) and what the operator passed
// (--ca-cert-hash pins, the two --unsafe-* flags). Discovery rows run
// against undici's MockAgent on a FakeClock.
import t from 'tap';
import { MockAgent } from 'undici';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { clusterOf } from '../../../agent/credential/requester.js';
import { ExitCode, InputError, KubebootError } from '../../../agent/errors.js';
import type { BootstrapAuth, BootstrapKubeconfig } from '../../../agent/kubeconfig/parse.js';
import { silentLogger } from '../../../agent/log.js';
import { signDetachedJws } from '../../../agent/pki/jws.js';
import { caCertHash } from '../../../agent/pki/pin.js';
import { FakeClock } from '../../support/fake-time.js';
import { createCa } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const FILE = '/etc/kubeboot/bootstrap-kubeconfig';
const ca = await createCa('cluster-ca');
const other = await createCa('another-ca');
const bundle = ca.certPem + other.certPem;
const pin = caCertHash(ca.certPem);
const otherPin = caCertHash(other.certPem);
const reencoded = ca.certPem.trim() + '\n';

const TOKEN: BootstrapAuth = {
  kind: 'bootstrap-token',
  tokenId: 'abcdef',
  tokenSecret: '0123456789abcdef',
  token: 'abcdef.0123456789abcdef',
};
const CERT: BootstrapAuth = { kind: 'client-certificate', certPem: 'cert', keyPem: 'key' };
const BEARER: BootstrapAuth = { kind: 'bearer-token', token: 'opaque' };

/** cluster-info as the bootstrapsigner leaves it, signed for TOKEN, naming `caPem`. */
function clusterInfo(caPem: string): MockAgent {
  const kubeconfig = `apiVersion: v1\nclusters:\n- cluster:\n    server: ${SERVER}\n    certificate-authority-data: ${Buffer.from(caPem).toString('base64')}\n`;
  const data = { kubeconfig, 'jws-kubeconfig-abcdef': signDetachedJws(kubeconfig, 'abcdef', '0123456789abcdef') };
  const agent = new MockAgent();
  agent.disableNetConnect();
  agent
    .get(SERVER)
    .intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' })
    .reply(200, JSON.stringify({ data }))
    .persist();
  return agent;
}

interface Row {
  name: string;
  kubeconfig: { caPem: string | null; insecure?: boolean; auth?: BootstrapAuth };
  flags?: { pins?: string[]; allowInsecure?: boolean; skipCaVerification?: boolean };
  /** What cluster-info serves, for the rows that discover. */
  served?: string;
  /** The CA trusted, or the error: its class, the field named, the words. */
  want: { caPem: string } | { error: new (...a: never[]) => Error; field?: string; match: RegExp; code?: number };
}

const rows: Row[] = [
  // The kubeconfig names a CA.
  { name: 'CA, no pins: that CA', kubeconfig: { caPem: bundle }, want: { caPem: bundle } },
  {
    name: 'CA and a matching pin: only the pinned certificate',
    kubeconfig: { caPem: bundle },
    flags: { pins: [pin] },
    want: { caPem: reencoded },
  },
  {
    name: 'CA and no matching pin: refused',
    kubeconfig: { caPem: ca.certPem },
    flags: { pins: [otherPin.replace(/.$/, '0')] },
    want: { error: InputError, field: 'certificate-authority', match: /matches none of the --ca-cert-hash pins/ },
  },
  {
    name: 'CA that is not a certificate: refused before any handshake',
    kubeconfig: { caPem: '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n' },
    want: { error: InputError, field: 'certificate-authority', match: /does not hold a valid certificate/ },
  },
  // TLS verification switched off in the kubeconfig.
  {
    name: 'insecure-skip-tls-verify without --unsafe-allow-insecure-bootstrap: refused, even with a CA',
    kubeconfig: { caPem: ca.certPem, insecure: true },
    want: { error: InputError, field: 'insecure-skip-tls-verify', match: /TLS verification must stay on/ },
  },
  {
    name: 'insecure allowed, token and a pin: its CA is ignored, the pinned one is discovered',
    kubeconfig: { caPem: other.certPem, insecure: true },
    flags: { allowInsecure: true, pins: [pin] },
    served: ca.certPem,
    want: { caPem: reencoded },
  },
  {
    name: 'insecure allowed with a client certificate: nothing to discover with',
    kubeconfig: { caPem: ca.certPem, insecure: true, auth: CERT },
    flags: { allowInsecure: true },
    want: { error: InputError, field: 'certificate-authority', match: /needs a bootstrap token/ },
  },
  // No CA: discovery through cluster-info, which only a bootstrap token can do.
  {
    name: 'no CA, token and a matching pin: discovered',
    kubeconfig: { caPem: null },
    flags: { pins: [pin] },
    served: bundle,
    want: { caPem: reencoded },
  },
  {
    name: 'no CA, token, pins matching nothing served: refused',
    kubeconfig: { caPem: null },
    flags: { pins: [otherPin] },
    served: ca.certPem,
    want: { error: KubebootError, match: /matches none of the --ca-cert-hash pins/, code: ExitCode.other },
  },
  {
    name: 'no CA, token, no pin: refused unless told to skip CA verification',
    kubeconfig: { caPem: null },
    want: { error: KubebootError, match: /no --ca-cert-hash was given/, code: ExitCode.badInput },
  },
  {
    name: 'no CA, token, --unsafe-skip-ca-verification: whatever cluster-info signs',
    kubeconfig: { caPem: null },
    flags: { skipCaVerification: true },
    served: bundle,
    want: { caPem: bundle },
  },
  {
    name: 'no CA and a client certificate: the CA must be given',
    kubeconfig: { caPem: null, auth: CERT },
    flags: { pins: [pin] },
    want: { error: InputError, field: 'certificate-authority', match: /needs a bootstrap token, so give the CA here/ },
  },
  {
    name: 'no CA and a bearer token that is not a bootstrap token: the CA must be given',
    kubeconfig: { caPem: null, auth: BEARER },
    flags: { pins: [pin] },
    want: { error: InputError, field: 'certificate-authority', match: /needs a bootstrap token/ },
  },
];

t.test('which CA the bootstrap trusts', async (t) => {
  for (const row of rows) {
    const bootstrap: BootstrapKubeconfig = {
      file: FILE,
      server: SERVER,
      caPem: row.kubeconfig.caPem,
      insecureSkipTlsVerify: row.kubeconfig.insecure ?? false,
      tlsServerName: null,
      auth: row.kubeconfig.auth ?? TOKEN,
      tokenFile: null,
    };
    const config = defaultConfig('worker-1');
    config.caCertHashes = row.flags?.pins ?? [];
    config.unsafeAllowInsecureBootstrap = row.flags?.allowInsecure ?? false;
    config.unsafeSkipCaVerification = row.flags?.skipCaVerification ?? false;
    const agent = row.served ? clusterInfo(row.served) : undefined;
    // No row waits: a discovery that had to pause would hang on this clock, which nothing advances.
    const deps = { logger: silentLogger(), clock: new FakeClock(), ...(agent ? { dispatcher: agent } : {}) };
    const got = await clusterOf(bootstrap, config, deps).catch((e: unknown) => e);
    await agent?.close();
    if ('caPem' in row.want) {
      t.same(got, { server: SERVER, tlsServerName: null, caPem: row.want.caPem }, row.name);
    } else {
      t.type(got, row.want.error, `${row.name}: ${row.want.error.name}`);
      t.match((got as Error).message, row.want.match, `${row.name}: says why`);
      if (row.want.field) t.match(got, { file: FILE, field: row.want.field }, `${row.name}: names ${row.want.field} of the file`);
      if (row.want.code !== undefined) t.equal((got as KubebootError).code, row.want.code, `${row.name}: exit ${row.want.code}`);
    }
  }
});
