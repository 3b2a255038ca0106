// The storm bench's floor for approving (scripts/bench-side-by-side.ts): an
// approver that checks nothing. It watches CSRs of the kubelet client signer
// and writes each one's approval as soon as it sees it, at most 16 writes in
// flight (the limit `kubeboot approver` keeps), through the same client code.
// What a storm costs with it running is what any approver must at least add:
// one watch event in, one /approval write out, the signer's write after.
// Never for a real cluster: it approves every kubelet client CSR it sees.
//
//   node --import @tapjs/typescript/import scripts/bare-approver.ts CREDENTIAL.json
// CREDENTIAL.json: { server, caPem, certPem, keyPem }. Prints "watching" once
// its watch is open; ends on SIGTERM.
import { readFileSync } from 'node:fs';
import { KUBELET_CLIENT_SIGNER } from '../agent/identity.js';
import { KubeClient } from '../agent/kube/client.js';

const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const IN_FLIGHT = 16;

interface Csr {
  metadata: { name: string; resourceVersion: string };
  spec: { signerName: string };
  status?: { conditions?: { type: string }[] };
}

const { server, caPem, certPem, keyPem } = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Record<string, string>;
const client = new KubeClient({ server: server!, caPem: caPem! }, { kind: 'client-certificate', certPem: certPem!, keyPem: keyPem! });
const abort = new AbortController();
process.on('SIGTERM', () => abort.abort());

const queued: Csr[] = [];
const taken = new Set<string>();
let inFlight = 0;

const undecided = (c: Csr) => c.spec.signerName === KUBELET_CLIENT_SIGNER && !(c.status?.conditions ?? []).length;

async function approve(csr: Csr): Promise<void> {
  const body = {
    ...csr,
    status: {
      ...csr.status,
      conditions: [{ type: 'Approved', status: 'True', reason: 'BenchFloor', message: 'bare approver: no rule checked' }],
    },
  };
  const path = `${CSRS}/${csr.metadata.name}/approval`;
  const res = await client.request('PUT', path, { body, accept: [404, 409] });
  if (res.status !== 409) return;
  // Changed since the watch saw it (the signer, or a retried create): approve the newest, if still undecided.
  const fresh = await client.request<Csr>('GET', `${CSRS}/${csr.metadata.name}`, { accept: [404] });
  if (fresh.status === 200 && undecided(fresh.body)) await approve(fresh.body);
}

function pump(): void {
  while (inFlight < IN_FLIGHT && queued.length > 0) {
    const csr = queued.shift()!;
    inFlight++;
    approve(csr)
      .catch((err: unknown) => process.stderr.write(`bare approver: ${csr.metadata.name}: ${(err as Error).message}\n`))
      .finally(() => {
        inFlight--;
        pump();
      });
  }
}

function take(csr: Csr): void {
  if (!undecided(csr) || taken.has(csr.metadata.name)) return;
  taken.add(csr.metadata.name);
  queued.push(csr);
  pump();
}

/**
 * Lists every CSR in pages (the storms before leave thousands, past the
 * client's 4 MiB bound for one body), takes the undecided ones, and returns
 * where a watch goes on from.
 */
async function list(): Promise<string> {
  let next: string | undefined;
  for (;;) {
    const { body } = await client.request<{ metadata: { resourceVersion: string; continue?: string }; items: Csr[] }>('GET', CSRS, {
      query: { limit: 250, continue: next },
    });
    for (const csr of body.items) take(csr);
    if (!body.metadata.continue) return body.metadata.resourceVersion;
    next = body.metadata.continue;
  }
}

let rv = await list();
process.stdout.write('watching\n');
while (!abort.signal.aborted) {
  try {
    for await (const ev of client.watch<Csr>(CSRS, { resourceVersion: rv }, abort.signal)) {
      if (ev.type === 'ERROR') break; // its resourceVersion is gone: list again
      rv = ev.object.metadata.resourceVersion;
      if (ev.type !== 'DELETED' && ev.type !== 'BOOKMARK') take(ev.object);
    }
    if (!abort.signal.aborted) rv = await list();
  } catch (err) {
    if (abort.signal.aborted) break;
    process.stderr.write(`bare approver: watch ended (${(err as Error).message}); listing again\n`);
    rv = await list();
  }
}
await client.close();
