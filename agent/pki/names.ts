/**
 * Subject and SAN helpers shared by CSRs and certificates.
 */
import { isIP } from 'node:net';
import type { Subject } from '../identity.js';
import { excerpt } from '../text.js';
import { x509 } from './x509.js';

/**
 * The subject as a Name: one RDN per O, then CN, the order Go's
 * pkix.Name.ToRDNSequence writes. Values are typed explicitly so the library
 * never unescapes them; PrintableString when possible, else UTF8String, as Go
 * encodes them.
 */
export function subjectToName(subject: Subject): x509.Name {
  const value = (text: string) => (x509.Name.isPrintableString(text) ? { printableString: text } : { utf8String: text });
  return new x509.Name([...subject.organizations.map((o) => ({ O: [value(o)] })), { CN: [value(subject.commonName)] }]);
}

export function subjectOfName(name: x509.Name): Subject {
  return { commonName: name.getField('CN')[0] ?? '', organizations: name.getField('O') };
}

/** "CN=system:node:a, O=[system:nodes]": for messages. */
export function describeSubject(subject: Subject): string {
  return `CN=${subject.commonName}, O=[${subject.organizations.join(', ')}]`;
}

/** Same CN, and the same set of organizations (order and repeats ignored). */
export function sameSubject(a: Subject, b: Subject): boolean {
  return a.commonName === b.commonName && sameSet(a.organizations, b.organizations);
}

export function sameSet(a: readonly string[], b: readonly string[]): boolean {
  const sa = new Set(a);
  const sb = new Set(b);
  return sa.size === sb.size && [...sa].every((v) => sb.has(v));
}

/**
 * Canonical text of an IP address ("::1" and "0:0:0:0:0:0:0:1" compare
 * equal); anything else is returned unchanged.
 */
export function canonicalIp(ip: string): string {
  const family = isIP(ip);
  if (family === 0) return ip;
  return new URL(family === 6 ? `http://[${ip}]/` : `http://${ip}/`).hostname.replace(/^\[|\]$/g, '');
}

export interface AltNames {
  dnsNames: string[];
  ipAddresses: string[];
}

export function altNamesExtension(names: AltNames): x509.SubjectAlternativeNameExtension {
  return new x509.SubjectAlternativeNameExtension([
    ...names.dnsNames.map((value) => ({ type: 'dns' as const, value })),
    ...names.ipAddresses.map((value) => ({ type: 'ip' as const, value })),
  ]);
}

export function altNamesOf(extensions: readonly x509.Extension[]): AltNames {
  const dnsNames: string[] = [];
  const ipAddresses: string[] = [];
  for (const ext of extensions) {
    if (ext.type !== '2.5.29.17') continue;
    const san = ext instanceof x509.SubjectAlternativeNameExtension ? ext : new x509.SubjectAlternativeNameExtension(ext.rawData);
    for (const name of san.names.items) {
      if (name.type === 'dns') dnsNames.push(name.value);
      if (name.type === 'ip') ipAddresses.push(canonicalIp(name.value));
    }
  }
  return { dnsNames, ipAddresses };
}

/**
 * Why `name` can never be a node's certificate name, or null. A node picks
 * its own name (whoever holds a pool's user-data does), so `kubernetes`,
 * `kubernetes.default.svc` or the API server's host name would otherwise be
 * a serving certificate every client of the cluster CA accepts for the API
 * server. `apiServer.names`: its names in lower case (the approver's
 * ApiServerFacts; `kubeboot token create` passes the admin kubeconfig's host).
 */
export function reservedNameProblem(name: string, apiServer: { readonly names: readonly string[] } | null): string | null {
  const n = name.toLowerCase().replace(/\.$/, '');
  const show = excerpt(name);
  if (n === 'kubernetes' || n.startsWith('kubernetes.')) return `${show} is the API server's Service name`;
  if (n.endsWith('.svc') || n.includes('.svc.')) return `${show} is a cluster Service name (*.svc)`;
  if (n === 'localhost' || n.endsWith('.localhost') || n === 'localhost.localdomain') return `${show} names the local host`;
  if (apiServer?.names.includes(n)) return `${show} is one of the API server's names`;
  return null;
}
