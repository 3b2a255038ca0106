// The approver's policy table (README, "Cluster side") read independently of
// agent/approver, judged on Go's reading of a CSR's request and of the
// certificate the signer issued: certview/main.go, built with the machine's
// Go from the standard library only, whose crypto/x509 is what kube-apiserver
// and the csrsigning controller parse with (and whose view of an issued
// certificate, CN and O, is who the API server says the holder is).
import { execFile, spawn } from 'node:child_process';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { KubeObject } from './admin.js';
import { onPath } from './binaries.js';
import { OIDS } from './pkcs10.js';

const KUBE_APISERVER_CLIENT = 'kubernetes.io/kube-apiserver-client';
const KUBELET_SERVING = 'kubernetes.io/kubelet-serving';
const DS = 'digital signature';
const KE = 'key encipherment';
const CA = 'client auth';
const SA = 'server auth';

/** How the approver under test was configured, in the words of its flags. */
export interface ModelPolicy {
  kubeProxyCommonName: string;
  /** --serving-dns-suffix */
  dnsSuffix: string;
  /** --serving-ip-cidr (IPv4) */
  ipv4Cidr: string;
  /** --max-expiration */
  maxExpirationSeconds: number;
  /** --max-proxy-serving-expiration (default 24h): kube-proxy and serving CSRs must set expirationSeconds, at most this. */
  maxProxyServingExpirationSeconds?: number;
}

export interface World {
  /** Node objects that exist, with the addresses in their status. */
  nodes: Map<string, string[]>;
}

/** RFC 1123 subdomain, as kube-apiserver validates Node names. */
export function isDnsSubdomain(name: string): boolean {
  return name.length <= 253 && name.split('.').every((label) => /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(label));
}

export interface GoView {
  error?: string;
  commonName: string;
  organization: string[] | null;
  names: { type: string; value: string }[] | null;
  dnsNames: string[] | null;
  ipAddresses: string[] | null;
  emails: string[] | null;
  uris: string[] | null;
  sanTags: number[] | null;
  extensions: string[] | null;
  keyType: string;
  keyBits: number;
  curve: string;
  signatureOK: boolean;
  isCA: boolean;
  keyUsage: number;
  extKeyUsage: number[] | null;
  unknownExtKeyUsage: string[] | null;
  lifetimeSeconds: number;
}

const certviewDir = fileURLToPath(new URL('./certview/', import.meta.url));
const run = promisify(execFile);

/** Builds certview into `dir` with the machine's Go; returns its path. */
export async function buildCertview(dir: string): Promise<string> {
  const go = onPath('go') ?? '/usr/local/go/bin/go';
  const out = join(dir, 'certview');
  // Standard library only: Go's crypto/x509 is what kube-apiserver and the signer parse with.
  await run(go, ['build', '-o', out, '.'], { cwd: certviewDir, env: { ...process.env, HOME: process.env.HOME ?? homedir() } });
  return out;
}

/** Go's reading of each request and issued certificate (base64 PEM, as a CSR holds them), by id. */
export async function goViews(
  certview: string,
  items: { id: string; request: string; certificate: string }[],
): Promise<Map<string, { request?: GoView; certificate?: GoView }>> {
  const child = spawn(certview, [], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const done = new Promise<number | null>((resolve) => child.on('close', resolve));
  child.stdin.end(items.map((i) => JSON.stringify(i)).join('\n') + '\n');
  const code = await done;
  if (code !== 0) throw new Error(`certview exited ${code}`);
  const views = new Map<string, { request?: GoView; certificate?: GoView }>();
  for (const line of out.trim().split('\n')) {
    const v = JSON.parse(line) as { id: string; request?: GoView; certificate?: GoView };
    views.set(v.id, v);
  }
  return views;
}

const ALLOWED_KEYS = new Set(['ecdsa/P-256', 'ecdsa/P-384', 'rsa/2048', 'rsa/3072', 'rsa/4096']);

/** An IPv4 address inside an IPv4 CIDR, by arithmetic (not node:net's BlockList, which the approver uses). */
function inCidr(ip: string, cidr: string): boolean {
  const value = (dotted: string) => dotted.split('.').reduce((n, octet) => n * 256 + Number(octet), 0);
  const [net = '', bits = '0'] = cidr.split('/');
  if (!/^\d+\.\d+\.\d+\.\d+$/.test(ip)) return false;
  const size = 2 ** (32 - Number(bits));
  return Math.floor(value(ip) / size) === Math.floor(value(net) / size);
}

const sameSet = (a: readonly string[], b: readonly string[]) =>
  a.length === b.length && [...a].sort().join('\n') === [...b].sort().join('\n');

/** Why the policy table would not approve this CSR; empty when it would. */
export function policyProblems(
  csr: KubeObject,
  go: { request?: GoView; certificate?: GoView },
  world: World,
  policy: ModelPolicy,
): string[] {
  const problems: string[] = [];
  const say = (p: string) => problems.push(p);
  const username: string = csr.spec.username ?? '';
  const groups: string[] = csr.spec.groups ?? [];
  const usages: string[] = csr.spec.usages ?? [];
  const node = username.startsWith('system:node:') ? username.slice('system:node:'.length) : null;
  if (node === null || !groups.includes('system:nodes')) say(`requester ${JSON.stringify(username)} is not a node in system:nodes`);
  if (node !== null && !isDnsSubdomain(node))
    say(`node name ${JSON.stringify(node)} is not a DNS subdomain, so no Node of that name can exist`);
  if (node !== null && !world.nodes.has(node)) say(`no Node ${JSON.stringify(node)} exists`);
  const req = go.request;
  if (!req || req.error) return [...problems, `Go cannot read spec.request: ${req?.error}`];
  if (!req.signatureOK) say('spec.request is not signed by its key');
  // The identity as issued; the request's reading when the signer has not issued (yet, or ever).
  const views = [req, ...(go.certificate && !go.certificate.error ? [go.certificate] : [])];
  const identity = views.at(-1)!;
  if (go.certificate?.error) say(`Go cannot read the issued certificate: ${go.certificate.error}`);
  for (const v of views) {
    const types = (v.names ?? []).map((n) => n.type);
    if (types.some((ty) => ty !== OIDS.CN && ty !== OIDS.O)) say(`subject has attributes other than CN and O: ${types.join(',')}`);
    if (types.filter((ty) => ty === OIDS.CN).length !== 1) say(`subject has ${types.filter((ty) => ty === OIDS.CN).length} CNs`);
  }
  const keyName = identity.keyType === 'rsa' ? `rsa/${identity.keyBits}` : `${identity.keyType}/${identity.curve}`;
  if (!ALLOWED_KEYS.has(keyName)) say(`key ${keyName} is not allowed`);
  if (csr.spec.expirationSeconds !== undefined && csr.spec.expirationSeconds > policy.maxExpirationSeconds)
    say(`expirationSeconds ${csr.spec.expirationSeconds} > ${policy.maxExpirationSeconds}`);
  if (go.certificate && !go.certificate.error) {
    if (go.certificate.isCA) say('the issued certificate is a CA');
    if (go.certificate.lifetimeSeconds > policy.maxExpirationSeconds + 3600)
      say(`the issued certificate lives ${go.certificate.lifetimeSeconds} s`);
  }
  const shortest = policy.maxProxyServingExpirationSeconds ?? 24 * 3600;
  const unsetAllowed = csr.spec.signerName === KUBELET_SERVING && csr.spec.expirationSeconds === undefined;
  if (!unsetAllowed && !(csr.spec.expirationSeconds <= shortest))
    say(`expirationSeconds ${csr.spec.expirationSeconds} is not set and <= ${shortest}`);
  const o = identity.organization ?? [];
  const sanKinds = views.flatMap((v) => v.sanTags ?? []);
  const rsa = identity.keyType === 'rsa';
  if (new Set(usages).size !== usages.length) say(`usages repeat: ${usages.join(', ')}`);
  switch (csr.spec.signerName) {
    case KUBE_APISERVER_CLIENT: {
      if (identity.commonName !== policy.kubeProxyCommonName)
        say(`CN ${JSON.stringify(identity.commonName)} is not ${policy.kubeProxyCommonName}`);
      if (o.length > 0) say(`O ${JSON.stringify(o)} is not empty`);
      if (sanKinds.length > 0 || views.some((v) => (v.extensions ?? []).includes(OIDS.subjectAltName)))
        say(`SANs on a client certificate (kinds ${sanKinds.join(',')})`);
      if (!(sameSet(usages, [DS, CA]) || (rsa && sameSet(usages, [DS, KE, CA])))) say(`usages ${usages.join(', ')}`);
      if (go.certificate && !go.certificate.error && !sameSet((go.certificate.extKeyUsage ?? []).map(String), ['2']))
        say(`issued EKU ${go.certificate.extKeyUsage}`);
      break;
    }
    case KUBELET_SERVING: {
      if (identity.commonName !== `system:node:${node}`) say(`CN ${JSON.stringify(identity.commonName)} is not the requester's`);
      const suffix = policy.dnsSuffix.toLowerCase();
      if (node !== null && (node.toLowerCase() === suffix || node.toLowerCase().endsWith(`.${suffix}`)))
        say(`node name ${node} is under the serving DNS suffix`);
      if (!sameSet(o, ['system:nodes'])) say(`O ${JSON.stringify(o)} is not [system:nodes]`);
      if (sanKinds.some((k) => k !== 2 && k !== 7)) say(`SAN kinds ${sanKinds.join(',')} beyond DNS and IP`);
      const dns = identity.dnsNames ?? [];
      const ips = identity.ipAddresses ?? [];
      if (dns.length + ips.length === 0) say('no DNS or IP SAN');
      const allowedDns = new Set([node, `${node}.${policy.dnsSuffix}`].map((n) => String(n).toLowerCase()));
      for (const d of dns) if (!allowedDns.has(d.toLowerCase())) say(`DNS SAN ${d} is not the node's`);
      const nodeIps = world.nodes.get(node ?? '') ?? [];
      for (const ip of ips)
        if (!nodeIps.includes(ip) || !inCidr(ip, policy.ipv4Cidr)) say(`IP SAN ${ip} is not the node's in ${policy.ipv4Cidr}`);
      const ok = usages.includes(DS) && usages.includes(SA) && usages.every((u) => [DS, SA, KE].includes(u));
      if (!ok) say(`usages ${usages.join(', ')}`);
      break;
    }
    default:
      say(`signer ${csr.spec.signerName} is not one kubeboot approver handles`);
  }
  return problems;
}
