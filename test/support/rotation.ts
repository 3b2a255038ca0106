// Who renewed a node's kubelet client certificate, seen from outside: every
// state of its -current.pem link (checked on each file event in the
// directory, not only now and then), and every kubelet client CSR with the
// program that created it, from the apiserver's audit log.
import { createHash, createPrivateKey, X509Certificate } from 'node:crypto';
import { lstatSync, readFileSync, readlinkSync, watch, type FSWatcher } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { KubeObject } from './admin.js';
import type { ControlPlane } from './controlplane.js';
import { auditEventsFrom, credentialId, requestSpans, type AuditEvent, type JoinedNode } from './node-join.js';
import type { Component } from './processes.js';

/** X509SHA256=<hex>, as the apiserver names a client certificate in user.extra (credential-id). */
export function certificateId(pem: string): string {
  return `X509SHA256=${createHash('sha256').update(new X509Certificate(pem).raw).digest('hex')}`;
}

export interface LinkedCertificate {
  id: string;
  file: string;
  notBefore: number;
  notAfter: number;
  /** When the watch first saw it behind the link. */
  seenAt: number;
}

export interface LinkWatch {
  /** Each certificate the link pointed at, in order. */
  seen: LinkedCertificate[];
  /** What was wrong when it was looked at: a dangling link, a target elsewhere, a file that is not this node's certificate and key. */
  problems: string[];
  /** How many looks found no link at all (client-go removes it just before renaming the new one in). */
  absences: number;
  looks: number;
  look(): void;
  stop(): void;
}

/** Watches `<certDir>/kubelet-client-current.pem` of node `name`. */
export function watchKubeletLink(certDir: string, name: string): LinkWatch {
  const link = join(certDir, 'kubelet-client-current.pem');
  const w: LinkWatch = {
    seen: [],
    problems: [],
    absences: 0,
    looks: 0,
    look() {
      w.looks++;
      let target: string;
      try {
        if (!lstatSync(link).isSymbolicLink()) {
          w.problems.push(`${link} is not a symbolic link`);
          return;
        }
        target = resolve(certDir, readlinkSync(link));
      } catch {
        w.absences++;
        return;
      }
      if (dirname(target) !== resolve(certDir)) w.problems.push(`${link} points outside ${certDir}: ${target}`);
      let text: string;
      try {
        text = readFileSync(target, 'utf8');
      } catch (err) {
        // A link swapped between readlink and read points at a file that still exists: a missing target is dangling.
        w.problems.push(`${link} points at ${target}, which cannot be read (${(err as NodeJS.ErrnoException).code})`);
        return;
      }
      const certPem = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(text)?.[0];
      const keyPem = /-----BEGIN (?:EC |RSA )?PRIVATE KEY-----[\s\S]+?-----END (?:EC |RSA )?PRIVATE KEY-----/.exec(text)?.[0];
      if (!certPem || !keyPem) {
        w.problems.push(`${target} is not a certificate and key bundle`);
        return;
      }
      const cert = new X509Certificate(certPem);
      if (!cert.checkPrivateKey(createPrivateKey(keyPem))) w.problems.push(`${target}: the key does not match the certificate`);
      if (!cert.subject.includes(`CN=system:node:${name}`)) w.problems.push(`${target}: subject ${cert.subject.replaceAll('\n', ', ')}`);
      const id = certificateId(certPem);
      if (w.seen.at(-1)?.id !== id) {
        if (w.seen.some((s) => s.id === id)) w.problems.push(`${link} went back to an earlier certificate (${target})`);
        w.seen.push({
          id,
          file: target,
          notBefore: cert.validFromDate.getTime(),
          notAfter: cert.validToDate.getTime(),
          seenAt: Date.now(),
        });
      }
    },
    stop: () => watcher.close(),
  };
  const watcher: FSWatcher = watch(certDir, () => w.look());
  w.look();
  return w;
}

export interface KubeletCsr {
  name: string;
  username: string;
  /** The certificate issued for it, when issued. */
  certId: string | undefined;
  /**
   * Who asked: kubeboot names its CSRs like the kubelet's bootstrap
   * (`node-csr-<digest>`); the kubelet's certificate manager lets the server
   * name them (generateName `csr-`).
   */
  by: 'kubeboot' | 'kubelet';
}

/** Every kubernetes.io/kube-apiserver-client-kubelet CSR on the plane. */
export async function kubeletClientCsrs(plane: ControlPlane): Promise<KubeletCsr[]> {
  const csrs = (await plane.admin.listCsrs()).filter(
    (c: KubeObject) => c.spec.signerName === 'kubernetes.io/kube-apiserver-client-kubelet',
  );
  return csrs.map((c: KubeObject) => {
    const name = c.metadata.name as string;
    return {
      name,
      username: c.spec.username as string,
      certId: c.status?.certificate ? certificateId(Buffer.from(c.status.certificate as string, 'base64').toString()) : undefined,
      by: name.startsWith('node-csr-') ? ('kubeboot' as const) : ('kubelet' as const),
    };
  });
}

/** User agents (up to the first slash) of the CSR creations made as `username`, from the audit log. */
export function csrCreatorsAs(plane: ControlPlane, username: string): string[] {
  if (!plane.auditLog) throw new Error('the plane was started without an audit log');
  return readFileSync(plane.auditLog, 'utf8')
    .split('\n')
    .filter((l) => l.includes('certificatesigningrequests') && l.includes('"create"'))
    .map((l) => JSON.parse(l) as AuditEvent)
    .filter(
      (e) =>
        e.verb === 'create' &&
        e.objectRef?.resource === 'certificatesigningrequests' &&
        e.objectRef.subresource === undefined &&
        e.stage === 'ResponseComplete' &&
        e.user?.username === username,
    )
    .map((e) => (e.userAgent ?? 'none').split('/')[0]!);
}

/** The Node's Ready condition is True; throws at once if a node program exited. */
export async function waitNodeReady(plane: ControlPlane, name: string, programs: Component[]): Promise<void> {
  await plane.admin.waitFor(
    'the Node to turn Ready',
    async () => {
      const gone = programs.find((p) => p.exited !== undefined);
      if (gone) throw new Error(`${gone.name} exited (${gone.exited}); see ${gone.logFile}`);
      const cond = ((await plane.admin.getNode(name))?.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Ready');
      return cond?.status === 'True' ? true : undefined;
    },
    180_000,
  );
}

/**
 * The kubelet client CSRs and the link's certificates at one moment when
 * they agree: every issued renewal (a CSR made as system:node:<name>) is a
 * certificate the link pointed at, and every certificate after the first
 * (the bootstrap one) came from such a CSR. A renewal is issued a moment
 * before its file is linked, so this waits for that moment to pass.
 */
export async function csrsMatchingLink(
  plane: ControlPlane,
  link: LinkWatch,
  name: string,
): Promise<{ csrs: KubeletCsr[]; seen: LinkedCertificate[] }> {
  return plane.admin.waitFor(
    'the issued renewals and the certificates on the link to match',
    async () => {
      const csrs = await kubeletClientCsrs(plane);
      link.look();
      const seen = [...link.seen];
      const issued = new Set(csrs.flatMap((c) => (c.username === `system:node:${name}` && c.certId !== undefined ? [c.certId] : [])));
      const linked = new Set(seen.slice(1).map((s) => s.id));
      return issued.size === linked.size && [...issued].every((id) => linked.has(id)) ? { csrs, seen } : undefined;
    },
    60_000,
  );
}

/** The credential ids the node's kubelet has authenticated with so far, from the audit log. */
export function kubeletCredentialIds(joined: Pick<JoinedNode, 'plane' | 'net'>): Set<string | undefined> {
  return new Set(requestSpans(auditEventsFrom(joined.plane, joined.net.nodeIp, 'kubelet/')).map((r) => credentialId(r.event)));
}

/** Waits until the kubelet authenticates with a certificate that replaced the first one on the link; fails at once if the kubelet or its runtime exits. */
export async function waitKubeletUsesRenewal(
  joined: Pick<JoinedNode, 'plane' | 'net' | 'node'>,
  link: LinkWatch,
  what: string,
): Promise<LinkedCertificate> {
  const { node } = joined;
  return joined.plane.admin.waitFor(
    what,
    async () => {
      const gone = [node.kubelet, node.fakecri].find((c) => c.exited !== undefined);
      if (gone) throw new Error(`${gone.name} exited (${gone.exited}); see ${gone.logFile}`);
      link.look();
      const used = kubeletCredentialIds(joined);
      return link.seen.slice(1).find((s) => used.has(s.id));
    },
    14 * 60_000,
  );
}
