// One watch over every CSR, for benchmarks: when each was first seen
// approved and when it was issued, on this process's clock. And the same
// story told by the API server's audit log: when each CSR was created and
// every write of its approval that succeeded, by whose credential.
import { readFileSync } from 'node:fs';
import { KubeClient } from '../../agent/kube/client.js';
import { CSRS } from './approver.js';
import type { ControlPlane } from './controlplane.js';
import { credentialId, type AuditEvent } from './node-join.js';

export interface CsrTimeline {
  /** CSR name → performance.now() when the watch first showed it Approved. */
  approvedAt: Map<string, number>;
  /** Resolves once the CSR carries its certificate. */
  issued(name: string): Promise<void>;
  stop(): Promise<void>;
}

export async function watchCsrTimeline(plane: ControlPlane): Promise<CsrTimeline> {
  const admin = await plane.mintClientCert({ commonName: 'bench-admin', organizations: ['system:masters'] });
  const watcher = new KubeClient({ server: plane.server, caPem: plane.caPem }, { kind: 'client-certificate', ...admin });
  const approvedAt = new Map<string, number>();
  const waiters = new Map<string, () => void>();
  const issued = new Set<string>();
  const abort = new AbortController();
  const list = await watcher.request<{ metadata: { resourceVersion: string } }>('GET', CSRS);
  type Csr = { metadata: { name: string }; status?: { certificate?: string; conditions?: { type: string }[] } };
  const watching = (async () => {
    for await (const ev of watcher.watch<Csr>(CSRS, { resourceVersion: list.body.metadata.resourceVersion }, abort.signal)) {
      const { name } = ev.object.metadata;
      if (!approvedAt.has(name) && ev.object.status?.conditions?.some((c) => c.type === 'Approved'))
        approvedAt.set(name, performance.now());
      if (ev.object.status?.certificate) {
        issued.add(name);
        waiters.get(name)?.();
      }
    }
  })().catch(() => undefined);
  return {
    approvedAt,
    issued: (name) => new Promise<void>((resolve) => (issued.has(name) ? resolve() : waiters.set(name, resolve))),
    async stop() {
      abort.abort();
      await watching;
      await watcher.close();
    },
  };
}

/** A successful request in the audit log: when the API server received it and answered it (epoch ms), and the credential it came with. */
export interface AuditedWrite {
  receivedAt: number;
  at: number;
  /** `X509SHA256=<hex>` for a client certificate (rotation.ts certificateId). */
  credential: string | undefined;
}

export interface CsrAudit {
  /** CSR name → its creation. */
  created: Map<string, AuditedWrite>;
  /** CSR name → every write of its `approval` subresource answered 200, in log order. */
  approvals: Map<string, AuditedWrite[]>;
  /** Every create or update of the Lease answered 200 or 201, in log order. */
  leaseWrites: AuditedWrite[];
}

/** Reads the audit log of a plane started with `audit` as it is now; `lease` is `<namespace>/<name>`. */
export function readCsrAudit(plane: ControlPlane, lease: string): CsrAudit {
  if (!plane.auditLog) throw new Error('the plane was started without an audit log');
  const [leaseNamespace, leaseName] = lease.split('/');
  const audit: CsrAudit = { created: new Map(), approvals: new Map(), leaseWrites: [] };
  for (const line of readFileSync(plane.auditLog, 'utf8').split('\n')) {
    if (!line.includes('"ResponseComplete"') || !(line.includes('certificatesigningrequests') || line.includes('leases'))) continue;
    const e = JSON.parse(line) as AuditEvent;
    const code = e.responseStatus?.code ?? 0;
    if (code < 200 || code > 299) continue;
    const write = { receivedAt: Date.parse(e.requestReceivedTimestamp), at: Date.parse(e.stageTimestamp), credential: credentialId(e) };
    const ref = e.objectRef ?? {};
    if (ref.resource === 'certificatesigningrequests' && ref.name !== undefined) {
      if (e.verb === 'create' && ref.subresource === undefined) audit.created.set(ref.name, write);
      if (e.verb === 'update' && ref.subresource === 'approval')
        audit.approvals.set(ref.name, [...(audit.approvals.get(ref.name) ?? []), write]);
    }
    if (
      ref.resource === 'leases' &&
      ref.namespace === leaseNamespace &&
      ref.name === leaseName &&
      (e.verb === 'create' || e.verb === 'update')
    )
      audit.leaseWrites.push(write);
  }
  return audit;
}

/** Nearest-rank percentile (`p` in 0–100) of `values`; NaN when there are none. */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? Number.NaN : sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]!;
}
