/**
 * Reads kubeconfigs: the operator's bootstrap kubeconfig, and the client
 * kubeconfigs kubeboot writes. Every error is an InputError naming the file
 * and the field path (`users[0].user.token`); no message ever contains a
 * token, key or credential file's content.
 */
import path from 'node:path';
import { InputError } from '../errors.js';
import { isMapping, kindOf } from '../config/shape.js';
import { parseYaml } from '../config/yaml.js';
import { quote } from '../config/values.js';
import { UnreadableInputError } from '../errors.js';

import type { ReadFile } from '../read-optional.js';

export type BootstrapAuth =
  | { kind: 'bootstrap-token'; tokenId: string; tokenSecret: string; token: string }
  | { kind: 'bearer-token'; token: string }
  | { kind: 'client-certificate'; certPem: string; keyPem: string };

export interface BootstrapKubeconfig {
  file: string;
  /** `https://host[:port]`, without a trailing slash. */
  server: string;
  caPem: string | null;
  insecureSkipTlsVerify: boolean;
  tlsServerName: string | null;
  auth: BootstrapAuth;
  /** Absolute path of the `tokenFile` the token came from, if it did. */
  tokenFile: string | null;
}

export interface ClientKubeconfig {
  file: string;
  server: string;
  caPem: string | null;
  insecureSkipTlsVerify: boolean;
  tlsServerName: string | null;
  certPem: string;
  keyPem: string;
}

export async function parseBootstrapKubeconfig(file: string, text: string, readFile: ReadFile): Promise<BootstrapKubeconfig> {
  const doc = new Doc(file, readFile);
  const { cluster, user } = doc.select(text);
  const clusterInfo = await doc.cluster(cluster);
  const credential = await doc.credential(user);
  if (credential === null) {
    throw doc.error(
      `${user.at}.user`,
      'no usable credential (want token, tokenFile, or client-certificate and client-key; exec and auth-provider plugins are not supported)',
    );
  }
  return { file, ...clusterInfo, ...credential };
}

/** For kubeconfigs kubeboot wrote: a client certificate and key are required. */
export async function parseClientKubeconfig(file: string, text: string, readFile: ReadFile): Promise<ClientKubeconfig> {
  const doc = new Doc(file, readFile);
  const { cluster, user } = doc.select(text);
  const clusterInfo = await doc.cluster(cluster);
  const credential = await doc.clientCertificate(user);
  if (credential === null) throw doc.error(`${user.at}.user`, 'no client certificate (want client-certificate and client-key)');
  return { file, ...clusterInfo, certPem: credential.certPem, keyPem: credential.keyPem };
}

// A token of two alphanumeric parts joined by one '.' can only be meant as a
// bootstrap token (static tokens from token.csv are usually hex or base64,
// service-account JWTs have two dots), so it must then be a valid one: a typo
// would otherwise be sent as a bearer token and fail as a bare 401.
const BOOTSTRAP_TOKEN = /^([a-z0-9]{6})\.([a-z0-9]{16})$/;
const BOOTSTRAP_TOKEN_SHAPED = /^([A-Za-z0-9]+)\.([A-Za-z0-9]+)$/;
/** Service-account JWTs are a few KiB; anything far larger is not a token. */
const MAX_TOKEN_LENGTH = 16_384;
const BOOTSTRAP_WANT = 'not a bootstrap token (want [a-z0-9]{6}.[a-z0-9]{16})';

export function classifyToken(token: string): BootstrapAuth | { problem: string } {
  const m = BOOTSTRAP_TOKEN.exec(token);
  if (m !== null) return { kind: 'bootstrap-token', tokenId: m[1] as string, tokenSecret: m[2] as string, token };
  const shaped = BOOTSTRAP_TOKEN_SHAPED.exec(token);
  if (shaped === null) return { kind: 'bearer-token', token };
  const [, id = '', secret = ''] = shaped;
  // Describe the defect by lengths and character classes only, never by content.
  const defects: string[] = [];
  if (/[A-Z]/.test(token)) defects.push('it has upper-case letters');
  if (id.length !== 6) defects.push(`the id has ${id.length} characters`);
  if (secret.length !== 16) defects.push(`the secret has ${secret.length} characters`);
  return { problem: `${BOOTSTRAP_WANT}: ${defects.join(', ')}` };
}

interface Entry {
  /** Field path of the entry, e.g. `clusters[0]`. */
  at: string;
  body: Record<string, unknown>;
}

type ClusterInfo = Pick<BootstrapKubeconfig, 'server' | 'caPem' | 'insecureSkipTlsVerify' | 'tlsServerName'>;

/** One kubeconfig being read: knows its file for messages and for relative paths. */
class Doc {
  readonly file: string;
  readonly dir: string;
  readonly readFile: ReadFile;

  constructor(file: string, readFile: ReadFile) {
    this.file = file;
    this.dir = path.dirname(file);
    this.readFile = readFile;
  }

  error(field: string, problem: string): InputError {
    return new InputError(this.file, field, problem);
  }

  /** A file this kubeconfig names; an unusable one is reported under the field that named it. */
  private async read(field: string, file: string): Promise<string | null> {
    try {
      return await this.readFile(file);
    } catch (err) {
      if (err instanceof UnreadableInputError) throw this.error(field, `${err.file} ${err.problem}`);
      throw err;
    }
  }

  /** current-context → context → cluster + user; without one, the only cluster and user. */
  select(text: string): { cluster: Entry; user: Entry } {
    if (text.trim() === '') throw this.error('(document)', 'file is empty');
    const root = parseYaml(this.file, text);
    if (!isMapping(root)) throw this.error('(document)', `expected a kubeconfig mapping, got ${kindOf(root)}`);
    const clusters = this.namedList(root, 'clusters', 'cluster');
    const users = this.namedList(root, 'users', 'user');
    const contexts = this.namedList(root, 'contexts', 'context');
    if (clusters.length === 0) throw this.error('clusters', 'no cluster defined');

    const current = root['current-context'];
    if (current !== undefined && current !== null && current !== '') {
      if (typeof current !== 'string') throw this.error('current-context', `expected a string, got ${kindOf(current)}`);
      const context = contexts.find((c) => c.name === current);
      if (context === undefined) {
        throw this.error('current-context', `context ${quote(current)} not found (have: ${names(contexts)})`);
      }
      return this.fromContext(context, clusters, users);
    }
    if (contexts.length === 1 && contexts[0] !== undefined) return this.fromContext(contexts[0], clusters, users);
    // matches clientcmd: with several contexts and none current, there is no choosing.
    if (contexts.length > 1)
      throw this.error('current-context', `not set, and there are ${contexts.length} contexts to choose from (${names(contexts)})`);
    if (users.length === 0) throw this.error('users', 'no user defined');
    if (clusters.length === 1 && users.length === 1 && clusters[0] !== undefined && users[0] !== undefined) {
      return { cluster: clusters[0], user: users[0] };
    }
    throw this.error('current-context', `not set, and there are ${clusters.length} clusters and ${users.length} users to choose from`);
  }

  private fromContext(
    context: Entry & { name: string },
    clusters: (Entry & { name: string })[],
    users: (Entry & { name: string })[],
  ): { cluster: Entry; user: Entry } {
    const pick = (field: 'cluster' | 'user', list: (Entry & { name: string })[]): Entry => {
      const want = context.body[field];
      const at = `${context.at}.context.${field}`;
      if (typeof want !== 'string' || want === '') throw this.error(at, 'missing');
      const found = list.find((e) => e.name === want);
      if (found === undefined) throw this.error(at, `${field} ${quote(want)} not found (have: ${names(list)})`);
      return found;
    };
    return { cluster: pick('cluster', clusters), user: pick('user', users) };
  }

  /** `clusters: [{name, cluster: {...}}]` and its siblings. */
  private namedList(root: Record<string, unknown>, key: string, inner: string): (Entry & { name: string })[] {
    const list = root[key];
    if (list === undefined || list === null) return [];
    if (!Array.isArray(list)) throw this.error(key, `expected a list, got ${kindOf(list)}`);
    return list.map((item: unknown, i) => {
      const at = `${key}[${i}]`;
      if (!isMapping(item)) throw this.error(at, `expected a mapping, got ${kindOf(item)}`);
      const body = item[inner] ?? {};
      if (!isMapping(body)) throw this.error(`${at}.${inner}`, `expected a mapping, got ${kindOf(body)}`);
      const name = item['name'];
      return { at, name: typeof name === 'string' ? name : '', body };
    });
  }

  async cluster(entry: Entry): Promise<ClusterInfo> {
    const at = `${entry.at}.cluster`;
    const c = entry.body;
    const server = this.server(`${at}.server`, c['server']);
    const insecure = c['insecure-skip-tls-verify'] ?? false;
    if (typeof insecure !== 'boolean')
      throw this.error(`${at}.insecure-skip-tls-verify`, `expected true or false, got ${kindOf(insecure)}`);
    const caPem = await this.pem(at, c, 'certificate-authority', 'CERTIFICATE');
    if (caPem !== null && insecure) {
      // matches kubectl: a CA together with insecure-skip-tls-verify is refused as contradictory.
      throw this.error(`${at}.insecure-skip-tls-verify`, 'cannot be combined with certificate-authority(-data); remove one');
    }
    const tlsServerName = this.optionalString(`${at}.tls-server-name`, c['tls-server-name']);
    return { server, caPem, insecureSkipTlsVerify: insecure, tlsServerName };
  }

  private server(at: string, raw: unknown): string {
    if (raw === undefined || raw === null || raw === '') throw this.error(at, 'missing');
    if (typeof raw !== 'string') throw this.error(at, `expected a URL, got ${kindOf(raw)}`);
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw this.error(at, 'not a URL (want https://host[:port])');
    }
    // The URL is not quoted below: it could carry user:password.
    if (url.protocol !== 'https:') throw this.error(at, `must be an https:// URL, got scheme ${url.protocol.replace(':', '')}`);
    if (url.username !== '' || url.password !== '') throw this.error(at, 'must not contain credentials');
    if (url.hostname === '') throw this.error(at, 'has no host');
    if (url.pathname !== '/' && url.pathname !== '') throw this.error(at, `must not have a path, got ${quote(url.pathname)}`);
    if (url.search !== '' || url.hash !== '') throw this.error(at, 'must not have a query or fragment');
    return url.origin;
  }

  private optionalString(at: string, raw: unknown): string | null {
    if (raw === undefined || raw === null || raw === '') return null;
    if (typeof raw !== 'string') throw this.error(at, `expected a string, got ${kindOf(raw)}`);
    return raw;
  }

  /**
   * `<field>-data` (base64 PEM) or `<field>` (a file, relative to the
   * kubeconfig's directory). Only the PEM markers are checked here; parsing
   * the certificate or key is the PKI module's job.
   */
  private async pem(
    at: string,
    body: Record<string, unknown>,
    field: string,
    label: 'CERTIFICATE' | 'PRIVATE KEY',
  ): Promise<string | null> {
    const data = this.optionalString(`${at}.${field}-data`, body[`${field}-data`]);
    const fileRef = this.optionalString(`${at}.${field}`, body[field]);
    if (data !== null && fileRef !== null) {
      throw this.error(`${at}.${field}`, `cannot be combined with ${field}-data; remove one`);
    }
    let pem: string;
    let where: string;
    if (data !== null) {
      where = `${at}.${field}-data`;
      const compact = data.replace(/\s+/g, '');
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(compact) || compact.length % 4 !== 0) throw this.error(where, 'not valid base64');
      pem = Buffer.from(compact, 'base64').toString('utf8');
    } else if (fileRef !== null) {
      where = `${at}.${field}`;
      const resolved = path.resolve(this.dir, fileRef);
      const text = await this.read(where, resolved);
      if (text === null) throw this.error(where, `file not found: ${resolved}`);
      pem = text;
    } else {
      return null;
    }
    if (!hasPemBlock(pem, label)) {
      throw this.error(where, `does not contain a PEM ${label === 'CERTIFICATE' ? 'CERTIFICATE block' : 'private key'}`);
    }
    return pem;
  }

  async clientCertificate(entry: Entry): Promise<{ certPem: string; keyPem: string } | null> {
    const at = `${entry.at}.user`;
    const certPem = await this.pem(at, entry.body, 'client-certificate', 'CERTIFICATE');
    const keyPem = await this.pem(at, entry.body, 'client-key', 'PRIVATE KEY');
    if (certPem === null && keyPem === null) return null;
    if (keyPem === null)
      throw this.error(`${at}.client-key`, 'missing (a client certificate needs its key: client-key or client-key-data)');
    if (certPem === null) throw this.error(`${at}.client-certificate`, 'missing (client-key is set without a certificate)');
    return { certPem, keyPem };
  }

  async credential(entry: Entry): Promise<Pick<BootstrapKubeconfig, 'auth' | 'tokenFile'> | null> {
    const at = `${entry.at}.user`;
    const u = entry.body;
    const token = this.optionalString(`${at}.token`, u['token']);
    const tokenFileRef = this.optionalString(`${at}.tokenFile`, u['tokenFile']);
    const cert = await this.clientCertificate(entry);
    if (token !== null && tokenFileRef !== null) throw this.error(`${at}.tokenFile`, 'cannot be combined with token; remove one');
    if (cert !== null && (token !== null || tokenFileRef !== null)) {
      throw this.error(at, 'has both a token and a client certificate; a bootstrap kubeconfig needs exactly one credential');
    }
    if (cert !== null) return { auth: { kind: 'client-certificate', ...cert }, tokenFile: null };
    if (token !== null) return { auth: this.token(`${at}.token`, token), tokenFile: null };
    if (tokenFileRef === null) return null;
    const tokenFile = path.resolve(this.dir, tokenFileRef);
    const text = await this.read(`${at}.tokenFile`, tokenFile);
    if (text === null) throw this.error(`${at}.tokenFile`, `file not found: ${tokenFile}`);
    return { auth: this.token(`${at}.tokenFile`, text), tokenFile };
  }

  private token(at: string, raw: string): BootstrapAuth {
    // client-go trims the token file's content the same way.
    const token = raw.trim();
    if (token === '') throw this.error(at, 'empty token');
    if (/\s/.test(token)) throw this.error(at, 'token contains whitespace');
    // An HTTP header carries visible ASCII only; say so here rather than let undici fail with UND_ERR_INVALID_ARG.
    if (!/^[\x21-\x7e]+$/.test(token)) throw this.error(at, 'token has characters outside printable ASCII');
    if (token.length > MAX_TOKEN_LENGTH)
      throw this.error(at, `token is ${token.length} characters; at most ${MAX_TOKEN_LENGTH} are accepted`);
    const result = classifyToken(token);
    if ('problem' in result) throw this.error(at, result.problem);
    return result;
  }
}

function hasPemBlock(text: string, label: 'CERTIFICATE' | 'PRIVATE KEY'): boolean {
  const re =
    label === 'CERTIFICATE'
      ? /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/
      : /-----BEGIN (?:RSA |EC )?PRIVATE KEY-----[\s\S]+?-----END (?:RSA |EC )?PRIVATE KEY-----/;
  return re.test(text);
}

/** The names in a list, for a message: each quoted and cut at 60 characters, at most five. */
function names(list: { name: string }[]): string {
  if (list.length === 0) return 'none';
  const shown = list.slice(0, 5).map((e) => quote(e.name));
  return list.length > 5 ? `${shown.join(', ')} and ${list.length - 5} more` : shown.join(', ');
}
