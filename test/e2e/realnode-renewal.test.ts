// The real kubelet and kube-proxy through kubeboot's renewals, on the
// shortest certificates a cluster issues (kube-controller-manager
// --cluster-signing-duration=10m; the API's minimum expirationSeconds is 600):
// the test runs past the first certificates' notAfter until each identity has
// been renewed three times and both programs had time to move off the second
// certificate. From the apiserver's audit log: no request of
// either program is answered 401, each switches to every new certificate
// before the one it replaces expires, and the Node's Lease is renewed without
// a gap as long as its duration. The node is TPM-attested (issue 37): its
// AK is in the inventory, the approver runs with --inventory, and every
// kubelet client certificate, the first and each renewal, is issued on a
// quote by that swtpm (rule tpm-attested) while the real kubelet runs on it.
//
// Cost: about 14 minutes of wall time (13.5 of them waiting), little CPU (one kubelet, one
// kube-proxy, an idle plane); tap runs it beside the other files.
import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { CONSUMER_RELOAD_MS } from '../../agent/renewal/deadline.js';
import {
  auditEventsFrom,
  credentialId,
  joinRealNode,
  realNodeOrSkip,
  requestSpans,
  waitForIdentity,
  type AuditEvent,
} from '../support/node-join.js';

const NAME = 'realnode-renew';
// Certificate lifetimes, not CPU, set its length (~14 min): room past .taprc's 20 minutes for a loaded CI machine.
t.setTimeout(40 * 60_000);
const RENEWALS = 3;

interface Seen {
  id: string;
  notBefore: number;
  notAfter: number;
  /** When the test first saw it behind the -current.pem link. */
  onDisk: number;
}

/** X509SHA256=<hex>, as the apiserver's x509 authenticator names a client certificate in user.extra. */
function current(file: string): Omit<Seen, 'onDisk'> {
  const cert = new X509Certificate(readFileSync(file));
  return {
    id: `X509SHA256=${createHash('sha256').update(cert.raw).digest('hex')}`,
    notBefore: cert.validFromDate.getTime(),
    notAfter: cert.validToDate.getTime(),
  };
}

const at = (e: AuditEvent) => Date.parse(e.requestReceivedTimestamp);
const iso = (ms: number) => new Date(ms).toISOString();

if (await realNodeOrSkip(t)) {
  t.test(`the real kubelet and kube-proxy follow ${RENEWALS} renewals of 10-minute certificates without a 401`, async (t) => {
    const joined = await joinRealNode(t, NAME, { plane: { signingDuration: '10m' }, tpm: true });
    const { plane, net, node, layout } = joined;
    await plane.admin.waitFor(
      'the Node to turn Ready',
      async () => {
        const cond = ((await plane.admin.getNode(NAME))?.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Ready');
        return cond?.status === 'True' ? true : undefined;
      },
      180_000,
    );
    await waitForIdentity(t, layout, 'kube-proxy');
    const proxy = await node.startKubeProxy();
    await plane.admin.waitFor(
      'kube-proxy healthy',
      async () => ((await request(`http://${net.nodeIp}:10256/healthz`)).statusCode === 200 ? true : undefined),
      120_000,
    );

    const files = {
      kubelet: join(layout.kubeletCertDir, 'kubelet-client-current.pem'),
      'kube-proxy': join(layout.kubeProxyCertDir, 'kube-proxy-client-current.pem'),
    };
    const seen: Record<keyof typeof files, Seen[]> = { kubelet: [], 'kube-proxy': [] };
    const look = () => {
      for (const [identity, file] of Object.entries(files) as [keyof typeof files, string][]) {
        const c = current(file);
        if (!seen[identity].some((s) => s.id === c.id)) seen[identity].push({ ...c, onDisk: Date.now() });
      }
    };
    look();
    const firstExpiry = Math.max(seen.kubelet[0]!.notAfter, seen['kube-proxy'][0]!.notAfter);
    t.ok(
      seen.kubelet[0]!.notAfter - seen.kubelet[0]!.notBefore <= 16 * 60_000,
      'the kubelet certificate is a 10-minute one (notBefore backdated 5)',
    );
    // Polled by waitFor every 250 ms; ends at once if a program exits.
    const ended = await plane.admin.waitFor(
      `${RENEWALS} renewals of each identity, past the first certificates' notAfter`,
      async () => {
        const exited = [node.kubelet, proxy, node.fakecri].find((c) => c.exited !== undefined);
        if (exited) return `${exited.name} exited (${exited.exited}); see ${exited.logFile}`;
        look();
        // Also long enough for both consumers to have moved off the second certificate.
        const settled = (list: Seen[]) => list.length > RENEWALS && Date.now() > list[2]!.onDisk + CONSUMER_RELOAD_MS + 30_000;
        return settled(seen.kubelet) && settled(seen['kube-proxy']) && Date.now() > firstExpiry + 30_000 ? 'done' : undefined;
      },
      17 * 60_000,
    );
    if (ended !== 'done') throw new Error(ended);

    const now = Date.now();
    for (const [agent, identity, who] of [
      ['kubelet/', 'kubelet', 'the kubelet'],
      ['kube-proxy/', 'kube-proxy', 'kube-proxy'],
    ] as const) {
      const requests = requestSpans(auditEventsFrom(plane, net.nodeIp, agent));
      const unauthorized = requests.filter((r) => r.event.responseStatus?.code === 401);
      t.same(
        unauthorized.map((r) => `${r.event.requestReceivedTimestamp} ${r.event.verb} ${r.event.requestURI}`),
        [],
        `no request of ${who} was answered 401 (${requests.length} requests)`,
      );
      const certs = seen[identity];
      for (const [i, cert] of certs.entries()) {
        const uses = requests.filter((r) => credentialId(r.event) === cert.id);
        // A request still open (a watch) is in use now.
        const last = Math.max(...uses.map((r) => r.end ?? now));
        const next = certs[i + 1];
        if (next) {
          t.ok(uses.length > 0, `${who} used certificate ${i + 1} of ${certs.length}`);
          t.comment(
            `${who}: certificate ${i + 1} on disk ${iso(cert.onDisk)}${i === 0 ? ' (bootstrap)' : ''}, first used ${iso(Math.min(...uses.map((r) => r.start)))}, last used ${iso(last)}, ${Math.round((cert.notAfter - last) / 1000)} s before its notAfter ${iso(cert.notAfter)}`,
          );
          // Its successor has been on disk longer than the consumers' reload period: they must have moved on.
          if (now > next.onDisk + CONSUMER_RELOAD_MS + 15_000) {
            t.ok(
              last < cert.notAfter && last < now,
              `${who} had moved off certificate ${i + 1} (last used ${iso(last)}) before it expired (${iso(cert.notAfter)})`,
            );
          }
          const lead = cert.notAfter - next.onDisk;
          t.ok(
            lead >= CONSUMER_RELOAD_MS,
            `certificate ${i + 2} was on disk ${Math.round(lead / 1000)} s before certificate ${i + 1} expired: more than the consumers' 5-minute reload`,
          );
        }
        if (cert.notAfter < now) t.ok(last < cert.notAfter, `${who} used certificate ${i + 1} only while it was valid`);
      }
      t.ok(certs.length > RENEWALS, `${who} went through ${certs.length} certificates`);
    }

    // Every kubelet client certificate came through rule tpm-attested: a quote in each CSR, named in each approval.
    const kubeletCsrs = (await plane.admin.listCsrs()).filter(
      (c) => c.spec?.signerName === 'kubernetes.io/kube-apiserver-client-kubelet' && c.status?.certificate,
    );
    const renewals = kubeletCsrs.filter((c) => c.spec?.username === `system:node:${NAME}`);
    t.ok(renewals.length >= RENEWALS, `${renewals.length} kubelet client renewals were issued`);
    t.same(
      kubeletCsrs
        .filter(
          (c) =>
            !Buffer.from(c.spec?.request ?? '', 'base64')
              .toString()
              .includes('-----BEGIN KUBEBOOT TPM EVIDENCE-----'),
        )
        .map((c) => c.metadata.name),
      [],
      `each of the ${kubeletCsrs.length} issued kubelet client CSRs carries the TPM's quote`,
    );
    t.same(
      kubeletCsrs
        .filter((c) => !/tpm-attested/.test(c.status?.conditions?.find((k: { type: string }) => k.type === 'Approved')?.message ?? ''))
        .map((c) => c.metadata.name),
      [],
      'and each was approved with tpm-attested among the rules passed',
    );

    // matches the kubelet's defaults: nodeLeaseDurationSeconds 40, renewed every 10 s.
    const leaseUpdates = requestSpans(auditEventsFrom(plane, net.nodeIp, 'kubelet/'))
      .map((r) => r.event)
      .filter(
        (e) => e.objectRef?.resource === 'leases' && e.objectRef.name === NAME && e.verb === 'update' && e.responseStatus?.code === 200,
      )
      .map(at)
      .sort((a, b) => a - b);
    const gaps = leaseUpdates.slice(1).map((v, i) => v - leaseUpdates[i]!);
    const longest = Math.max(...gaps);
    t.ok(leaseUpdates.length > 30, `the kubelet renewed its Lease ${leaseUpdates.length} times`);
    t.ok(longest < 40_000, `the longest gap between Lease renewals was ${Math.round(longest / 1000)} s, under the 40 s lease duration`);
    const ready = ((await plane.admin.getNode(NAME))?.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Ready');
    t.equal(ready?.status, 'True', 'the Node is still Ready at the end');
    await joined.stop();
  });
}
