/**
 * ClusterRoleBindings that still let kube-controller-manager approve kubelet
 * client CSRs. Its csrapproving controller approves any `system:node:*`
 * client CSR whose requester may `create` certificatesigningrequests/
 * nodeclient (selfnodeclient for a renewal), on a check of the name's prefix
 * only (sarapprove.go): while such a binding stands, `--approve-kubelet-client`
 * refusing a CSR stops nothing. kubeadm makes two
 * (`kubeadm:node-autoapprove-bootstrap`,
 * `kubeadm:node-autoapprove-certificate-rotation`), kubeboot's
 * tls-bootstrap-rbac.yaml two more. Said at start and on /readyz, which stays
 * ready: the approver still approves, it is just not the only one.
 */
import type { KubeClient } from '../kube/client.js';
import { excerpt } from '../text.js';
import type { Clock } from '../time/clock.js';

export const KCM_NODE_CLIENT_ROLES: readonly string[] = [
  'system:certificates.k8s.io:certificatesigningrequests:nodeclient',
  'system:certificates.k8s.io:certificatesigningrequests:selfnodeclient',
];

const CLUSTER_ROLE_BINDINGS = '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings';
/** How long a look is reused by /readyz. */
const TTL_MS = 60_000;

interface BindingList {
  items?: { metadata?: { name?: string }; roleRef?: { kind?: string; name?: string } }[];
  metadata?: { continue?: string };
}

/** The names of the ClusterRoleBindings to either role, sorted. */
export async function kcmNodeClientBindings(client: KubeClient, signal?: AbortSignal): Promise<string[]> {
  const names: string[] = [];
  let page: string | undefined;
  do {
    const res = await client.request<BindingList>('GET', CLUSTER_ROLE_BINDINGS, { query: { limit: 500, continue: page }, signal });
    for (const b of res.body.items ?? [])
      if (b.roleRef?.kind === 'ClusterRole' && KCM_NODE_CLIENT_ROLES.includes(b.roleRef.name ?? '') && b.metadata?.name)
        names.push(b.metadata.name);
    page = res.body.metadata?.continue || undefined;
  } while (page !== undefined);
  return names.sort();
}

/** What to tell the operator about them, or null when there are none. */
export function kcmBindingsProblem(names: readonly string[]): string | null {
  if (names.length === 0) return null;
  const shown = names.map((n) => excerpt(n));
  return `kube-controller-manager still approves kubelet client CSRs on a name-prefix check, whatever this approver refuses, through ClusterRoleBinding ${shown.join(', ')}; delete them: kubectl delete clusterrolebinding ${shown.join(' ')}`;
}

/**
 * The last look for /readyz's text, looked at again in the background when
 * asked and older than a minute, so deleting the bindings shows there
 * without a restart.
 */
export function kcmBindingsMonitor(read: () => Promise<string[]>, clock: Clock): { look(): Promise<string[]>; detail(): string } {
  let last: { at: number; text: string } | null = null;
  let inFlight: Promise<string[]> | null = null;
  const look = (): Promise<string[]> => {
    inFlight ??= read()
      .then(
        (names) => {
          last = {
            at: clock.now().getTime(),
            text: kcmBindingsProblem(names) ?? 'no ClusterRoleBinding lets kube-controller-manager approve them',
          };
          return names;
        },
        (err: unknown) => {
          last = { at: clock.now().getTime(), text: `could not list ClusterRoleBindings: ${(err as Error).message}` };
          throw err;
        },
      )
      .finally(() => {
        inFlight = null;
      });
    return inFlight;
  };
  return {
    look,
    detail: () => {
      if (last === null || clock.now().getTime() - last.at >= TTL_MS) look().catch(() => {});
      return `kubelet client approval: on; ${last?.text ?? 'not looked at yet'}`;
    },
  };
}
