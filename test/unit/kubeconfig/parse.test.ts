import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { readOptional } from '../../../agent/read-optional.js';
import { InputError } from '../../../agent/errors.js';
import { classifyToken, parseBootstrapKubeconfig, parseClientKubeconfig } from '../../../agent/kubeconfig/parse.js';

const FILE = '/etc/kubernetes/bootstrap-kubelet.conf';
const CA = '-----BEGIN CERTIFICATE-----\nMIIBfakeCA\n-----END CERTIFICATE-----\n';
const CERT = '-----BEGIN CERTIFICATE-----\nMIIBfakeLeaf\n-----END CERTIFICATE-----\n';
const KEY_SECRET = 'MHcCAQEEIsecretkeymaterial';
const KEY = `-----BEGIN EC PRIVATE KEY-----\n${KEY_SECRET}\n-----END EC PRIVATE KEY-----\n`;
const SECRET = 'kq2m7x9p4c1z8w3v';
const TOKEN = `abcdef.${SECRET}`;
const b64 = (s: string): string => Buffer.from(s).toString('base64');

function reader(files: Record<string, string>) {
  return async (p: string): Promise<string | null> => files[p] ?? null;
}

/** A kubeadm-style bootstrap kubeconfig; `cluster` and `user` lines replace the defaults. */
function kubeconfig(o: { cluster?: string[]; user?: string[]; currentContext?: string | null } = {}): string {
  const cluster = o.cluster ?? [`certificate-authority-data: ${b64(CA)}`, 'server: https://10.0.0.1:6443'];
  const user = o.user ?? [`token: ${TOKEN}`];
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: kubernetes',
    '  cluster:',
    ...cluster.map((l) => `    ${l}`),
    'contexts:',
    '- name: tls-bootstrap-token-user@kubernetes',
    '  context: { cluster: kubernetes, user: tls-bootstrap-token-user }',
    ...(o.currentContext === null ? [] : [`current-context: ${o.currentContext ?? 'tls-bootstrap-token-user@kubernetes'}`]),
    'users:',
    '- name: tls-bootstrap-token-user',
    '  user:',
    ...user.map((l) => `    ${l}`),
    '',
  ].join('\n');
}

t.test('reads a kubeadm bootstrap kubeconfig with an embedded CA and a bootstrap token', async (t) => {
  const k = await parseBootstrapKubeconfig(FILE, kubeconfig(), reader({}));
  t.same(k, {
    file: FILE,
    server: 'https://10.0.0.1:6443',
    caPem: CA,
    insecureSkipTlsVerify: false,
    tlsServerName: null,
    auth: { kind: 'bootstrap-token', tokenId: 'abcdef', tokenSecret: SECRET, token: TOKEN },
    tokenFile: null,
  });
});

t.test('reads the CA and the token from files relative to the kubeconfig', async (t) => {
  const files = { '/etc/kubernetes/pki/ca.crt': CA, '/etc/kubernetes/token': `${TOKEN}\n` };
  const text = kubeconfig({
    cluster: ['certificate-authority: pki/ca.crt', 'server: https://api.example:6443/', 'tls-server-name: kubernetes'],
    user: ['tokenFile: token'],
  });
  const k = await parseBootstrapKubeconfig(FILE, text, reader(files));
  t.equal(k.caPem, CA);
  t.equal(k.server, 'https://api.example:6443', 'a trailing slash is dropped');
  t.equal(k.tlsServerName, 'kubernetes');
  t.equal(k.tokenFile, '/etc/kubernetes/token');
  t.same(k.auth, { kind: 'bootstrap-token', tokenId: 'abcdef', tokenSecret: SECRET, token: TOKEN });
});

t.test('uses the only cluster and user when there is no current-context', async (t) => {
  const text = `clusters:\n- name: c\n  cluster: { server: "https://h" }\nusers:\n- name: u\n  user: { token: ${TOKEN} }\n`;
  const k = await parseBootstrapKubeconfig(FILE, text, reader({}));
  t.equal(k.server, 'https://h');
  t.equal(k.caPem, null, 'no CA: the caller discovers it');
});

t.test('a static token and a client certificate are other credentials', async (t) => {
  const bearer = await parseBootstrapKubeconfig(FILE, kubeconfig({ user: ['token: 31ada4fd-adec-460c-809a-9e56ceb75269'] }), reader({}));
  t.same(bearer.auth, { kind: 'bearer-token', token: '31ada4fd-adec-460c-809a-9e56ceb75269' });
  const jwt = classifyToken('eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln');
  t.equal('kind' in jwt && jwt.kind, 'bearer-token', 'a JWT (two dots) is a bearer token');
  const cert = await parseBootstrapKubeconfig(
    FILE,
    kubeconfig({ user: [`client-certificate-data: ${b64(CERT)}`, `client-key-data: ${b64(KEY)}`] }),
    reader({}),
  );
  t.same(cert.auth, { kind: 'client-certificate', certPem: CERT, keyPem: KEY });
});

t.test('insecure-skip-tls-verify is reported for the caller to refuse', async (t) => {
  const k = await parseBootstrapKubeconfig(
    FILE,
    kubeconfig({ cluster: ['server: https://h:6443', 'insecure-skip-tls-verify: true'] }),
    reader({}),
  );
  t.equal(k.insecureSkipTlsVerify, true);
});

t.test('reads a client kubeconfig with certificate and key files', async (t) => {
  const pem = CERT + KEY;
  const text = kubeconfig({
    user: [
      'client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem',
      'client-key: /var/lib/kubelet/pki/kubelet-client-current.pem',
    ],
  });
  const k = await parseClientKubeconfig(
    '/etc/kubernetes/kubelet.conf',
    text,
    reader({ '/var/lib/kubelet/pki/kubelet-client-current.pem': pem }),
  );
  t.equal(k.certPem, pem);
  t.equal(k.keyPem, pem);
  t.equal(k.caPem, CA);
  await t.rejects(parseClientKubeconfig('/k.conf', kubeconfig(), reader({})), {
    message: '/k.conf: users[0].user: no client certificate (want client-certificate and client-key)',
  });
});

interface Bad {
  name: string;
  text: string;
  files?: Record<string, string>;
  message: string;
}

const bad: Bad[] = [
  { name: 'empty file', text: '\n  \n', message: `${FILE}: (document): file is empty` },
  {
    name: 'YAML syntax error names the line but not its content',
    text: `users:\n- name: x\n  user: {token: ${TOKEN}\n`,
    message: `${FILE}: line 4: invalid YAML: bad indentation, or an unclosed [ or { at column 1`,
  },
  { name: 'not a mapping', text: 'just a string\n', message: `${FILE}: (document): expected a kubeconfig mapping, got a string` },
  { name: 'no clusters', text: `users:\n- name: u\n  user: {token: ${TOKEN}}\n`, message: `${FILE}: clusters: no cluster defined` },
  { name: 'clusters is not a list', text: 'clusters: {}\n', message: `${FILE}: clusters: expected a list, got a mapping` },
  {
    name: 'missing server',
    text: kubeconfig({ cluster: [`certificate-authority-data: ${b64(CA)}`] }),
    message: `${FILE}: clusters[0].cluster.server: missing`,
  },
  {
    name: 'http server',
    text: kubeconfig({ cluster: ['server: http://10.0.0.1:6443'] }),
    message: `${FILE}: clusters[0].cluster.server: must be an https:// URL, got scheme http`,
  },
  {
    name: 'server with a path',
    text: kubeconfig({ cluster: ['server: https://10.0.0.1:6443/api'] }),
    message: `${FILE}: clusters[0].cluster.server: must not have a path, got "/api"`,
  },
  {
    name: 'server that is not a URL',
    text: kubeconfig({ cluster: ['server: 10.0.0.1:6443'] }),
    message: `${FILE}: clusters[0].cluster.server: not a URL (want https://host[:port])`,
  },
  {
    name: 'server with credentials',
    text: kubeconfig({ cluster: ['server: https://admin:hunter2@h:6443'] }),
    message: `${FILE}: clusters[0].cluster.server: must not contain credentials`,
  },
  {
    name: 'current-context pointing at a missing context',
    text: kubeconfig({ currentContext: 'prod' }),
    message: `${FILE}: current-context: context "prod" not found (have: "tls-bootstrap-token-user@kubernetes")`,
  },
  {
    name: 'context naming a missing user',
    text: `clusters:\n- name: c\n  cluster: {server: "https://h"}\ncontexts:\n- name: x\n  context: {cluster: c, user: nobody}\ncurrent-context: x\n`,
    message: `${FILE}: contexts[0].context.user: user "nobody" not found (have: none)`,
  },
  {
    name: 'no users and no context',
    text: 'clusters:\n- name: c\n  cluster: {server: "https://h"}\n',
    message: `${FILE}: users: no user defined`,
  },
  {
    name: 'ambiguous without current-context',
    text: `clusters:\n- name: a\n  cluster: {server: "https://a"}\n- name: b\n  cluster: {server: "https://b"}\nusers:\n- name: u\n  user: {token: ${TOKEN}}\n`,
    message: `${FILE}: current-context: not set, and there are 2 clusters and 1 users to choose from`,
  },
  {
    name: 'CA data not base64',
    text: kubeconfig({ cluster: ['certificate-authority-data: "not base64!"', 'server: https://h'] }),
    message: `${FILE}: clusters[0].cluster.certificate-authority-data: not valid base64`,
  },
  {
    name: 'CA data not a certificate',
    text: kubeconfig({ cluster: [`certificate-authority-data: ${b64('hello world')}`, 'server: https://h'] }),
    message: `${FILE}: clusters[0].cluster.certificate-authority-data: does not contain a PEM CERTIFICATE block`,
  },
  {
    name: 'CA file missing',
    text: kubeconfig({ cluster: ['certificate-authority: pki/ca.crt', 'server: https://h'] }),
    message: `${FILE}: clusters[0].cluster.certificate-authority: file not found: /etc/kubernetes/pki/ca.crt`,
  },
  {
    name: 'CA file and CA data',
    text: kubeconfig({ cluster: ['certificate-authority: /ca.crt', `certificate-authority-data: ${b64(CA)}`, 'server: https://h'] }),
    message: `${FILE}: clusters[0].cluster.certificate-authority: cannot be combined with certificate-authority-data; remove one`,
  },
  {
    name: 'both CA and insecure',
    text: kubeconfig({ cluster: [`certificate-authority-data: ${b64(CA)}`, 'server: https://h', 'insecure-skip-tls-verify: true'] }),
    message: `${FILE}: clusters[0].cluster.insecure-skip-tls-verify: cannot be combined with certificate-authority(-data); remove one`,
  },
  {
    name: 'no credentials at all',
    text: kubeconfig({ user: ['username: admin', 'password: pw'] }),
    message: `${FILE}: users[0].user: no usable credential (want token, tokenFile, or client-certificate and client-key; exec and auth-provider plugins are not supported)`,
  },
  {
    name: 'malformed bootstrap token (upper case)',
    text: kubeconfig({ user: [`token: ABCDEF.${SECRET}`] }),
    message: `${FILE}: users[0].user.token: not a bootstrap token (want [a-z0-9]{6}.[a-z0-9]{16}): it has upper-case letters`,
  },
  {
    name: 'malformed bootstrap token (short secret)',
    text: kubeconfig({ user: [`token: abcdef.${SECRET.slice(1)}`] }),
    message: `${FILE}: users[0].user.token: not a bootstrap token (want [a-z0-9]{6}.[a-z0-9]{16}): the secret has 15 characters`,
  },
  {
    name: 'malformed token in a token file',
    text: kubeconfig({ user: ['tokenFile: /t'] }),
    files: { '/t': `abcde.${SECRET}\n` },
    message: `${FILE}: users[0].user.tokenFile: not a bootstrap token (want [a-z0-9]{6}.[a-z0-9]{16}): the id has 5 characters`,
  },
  {
    name: 'tokenFile missing',
    text: kubeconfig({ user: ['tokenFile: bootstrap-token'] }),
    message: `${FILE}: users[0].user.tokenFile: file not found: /etc/kubernetes/bootstrap-token`,
  },
  {
    name: 'empty token file',
    text: kubeconfig({ user: ['tokenFile: /t'] }),
    files: { '/t': '\n' },
    message: `${FILE}: users[0].user.tokenFile: empty token`,
  },
  {
    name: 'token and tokenFile',
    text: kubeconfig({ user: [`token: ${TOKEN}`, 'tokenFile: /t'] }),
    message: `${FILE}: users[0].user.tokenFile: cannot be combined with token; remove one`,
  },
  {
    name: 'client certificate without key',
    text: kubeconfig({ user: [`client-certificate-data: ${b64(CERT)}`] }),
    message: `${FILE}: users[0].user.client-key: missing (a client certificate needs its key: client-key or client-key-data)`,
  },
  {
    name: 'client key that is not a key',
    text: kubeconfig({ user: [`client-certificate-data: ${b64(CERT)}`, `client-key-data: ${b64(CERT)}`] }),
    message: `${FILE}: users[0].user.client-key-data: does not contain a PEM private key`,
  },
  {
    name: 'token and client certificate',
    text: kubeconfig({ user: [`token: ${TOKEN}`, `client-certificate-data: ${b64(CERT)}`, `client-key-data: ${b64(KEY)}`] }),
    message: `${FILE}: users[0].user: has both a token and a client certificate; a bootstrap kubeconfig needs exactly one credential`,
  },
  {
    name: 'several contexts and no current-context (clientcmd refuses it too)',
    text: kubeconfig({ currentContext: null }).replace(
      'contexts:\n',
      'contexts:\n- name: other\n  context: { cluster: kubernetes, user: tls-bootstrap-token-user }\n',
    ),
    message: `${FILE}: current-context: not set, and there are 2 contexts to choose from ("other", "tls-bootstrap-token-user@kubernetes")`,
  },
  {
    name: 'token with non-ASCII characters',
    text: kubeconfig({ user: ['token: "tökén-ünïcode"'] }),
    message: `${FILE}: users[0].user.token: token has characters outside printable ASCII`,
  },
  {
    name: 'an alias named like a token is not echoed',
    text: kubeconfig({ user: [`token: *${TOKEN}`] }),
    message: `${FILE}: (document): invalid YAML: an alias names an anchor that is not defined before it`,
  },
  {
    name: 'deep nesting',
    text: `clusters: ${'['.repeat(5000)}\n`,
    message: `${FILE}: (document): invalid YAML: nested more than 64 levels deep`,
  },
  {
    name: 'an alias bomb',
    text: `a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n`,
    message: `${FILE}: (document): invalid YAML: aliases expand more than 100 times`,
  },
];

for (const c of bad) {
  t.test(`rejects: ${c.name}`, async (t) => {
    const err = await parseBootstrapKubeconfig(FILE, c.text, reader(c.files ?? {})).then(
      () => null,
      (e: unknown) => e,
    );
    t.type(err, InputError);
    t.equal((err as Error).message, c.message);
  });
}

t.test('no error message contains the token secret, the key material or a password', async (t) => {
  for (const c of bad) {
    const err = (await parseBootstrapKubeconfig(FILE, c.text, reader(c.files ?? {})).catch((e: unknown) => e)) as Error;
    for (const secret of [SECRET, SECRET.slice(1), KEY_SECRET, 'hunter2']) {
      t.notOk(err.message.includes(secret), `${c.name}: no secret in "${err.message}"`);
    }
  }
});

t.test('a CA file or token file that is not a regular file is refused naming the field, without blocking', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'kubeboot-parse-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(path.join(dir, 'ca.crt'));
  execFileSync('mkfifo', [path.join(dir, 'token')]);
  const file = path.join(dir, 'bootstrap.conf');
  const caDir = kubeconfig({ cluster: ['certificate-authority: ca.crt', 'server: https://h'] });
  await t.rejects(parseBootstrapKubeconfig(file, caDir, readOptional), {
    name: 'InputError',
    message: `${file}: clusters[0].cluster.certificate-authority: ${dir}/ca.crt is a directory; expected a regular file`,
  });
  const fifo = kubeconfig({ user: ['tokenFile: token'] });
  await t.rejects(parseBootstrapKubeconfig(file, fifo, readOptional), {
    name: 'InputError',
    message: `${file}: users[0].user.tokenFile: ${dir}/token is a named pipe (FIFO); expected a regular file`,
  });
});
