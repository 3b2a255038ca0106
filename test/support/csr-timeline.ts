// One watch over every CSR, for benchmarks: when each was first seen
// approved and when it was issued, on this process's clock.
import { KubeClient } from '../../agent/kube/client.js';
import { CSRS } from './approver.js';
import type { ControlPlane } from './controlplane.js';

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
