/**
 * What the cluster side offers a new node, as the admin commands find it,
 * and what a token and a join line need there. kubeboot's manifests let
 * every bootstrap token (group system:bootstrappers) create its CSR;
 * kubeadm's RBAC lets only its own group do so (`kubeadm:kubelet-bootstrap`,
 * cmd/kubeadm/app/phases/bootstraptoken/node/tlsbootstrap.go), and kubeadm
 * runs kube-proxy as a DaemonSet with a ServiceAccount token
 * (phases/addons/proxy), so nothing on the cluster approves a node's
 * kube-proxy CSR. Pure: the questions to the API server are
 * agent/admin/cluster-requests.ts's.
 */
import { KubebootError } from '../errors.js';

/** The group kubeadm's tokens carry and its RBAC grants (kubeadm's NodeBootstrapTokenAuthGroup). */
export const KUBEADM_TOKEN_GROUP = 'system:bootstrappers:kubeadm:default-node-token';
/** What makes a cluster serve every bootstrap token as kubeboot expects. */
export const RBAC_COMMAND = 'kubectl apply -f /usr/share/kubeboot/manifests/';
/** kubeadm's kube-proxy add-on (kube-system/kube-proxy), and the node setting that leaves kube-proxy's credential to it. */
export const KUBE_PROXY_DAEMONSET = 'kube-system/kube-proxy';

/** An answer the API server gave, or why none could be had (the admin may not ask, say). */
export type Finding<T> = { found: T } | { unknown: string };

/**
 * Whether a new token may create its CSR (the authorizer's answer to a
 * SubjectAccessReview for it): with the groups asked for, and with kubeadm's
 * group added (null: not asked, the first answer was yes or the group is
 * among those asked for).
 */
export interface CsrAccess {
  requested: boolean;
  withKubeadmGroup: boolean | null;
}

/**
 * `served`: the token as asked may create its CSR (kubeboot's manifests, or
 * a binding of the admin's own for one of its groups). `kubeadm`: only in
 * kubeadm's group (kubeadm's RBAC, kubeboot's not applied). `unserved`:
 * neither. `unknown`: the cluster could not be asked.
 */
export type TokenCluster = { kind: 'served' } | { kind: 'kubeadm' } | { kind: 'unserved' } | { kind: 'unknown'; why: string };

export function tokenCluster(access: Finding<CsrAccess>): TokenCluster {
  if ('unknown' in access) return { kind: 'unknown', why: access.unknown };
  if (access.found.requested) return { kind: 'served' };
  return access.found.withKubeadmGroup === true ? { kind: 'kubeadm' } : { kind: 'unserved' };
}

/** No RBAC on the cluster lets a bootstrap token create its CSR: a token made now would be refused (403) at its first request. */
export class UnservedClusterError extends KubebootError {
  override readonly name = 'UnservedClusterError';
  constructor(server: string, groups: readonly string[]) {
    const inGroups = groups.length > 0 ? ` in ${groups.join(', ')}` : '';
    super(
      `no bootstrap token${inGroups} may create its CSR at ${server} (neither kubeboot's RBAC nor kubeadm's for ${KUBEADM_TOKEN_GROUP}), so no token was made; apply kubeboot's and run its approver (docs/node-identity.md): ${RBAC_COMMAND}`,
    );
  }
}

/**
 * The groups a new token carries on this cluster, and what the admin should
 * hear. kubeadm's group is added only where the token would otherwise be
 * refused, never beside kubeboot's RBAC: there it would also take kubeadm's
 * auto-approval, which ignores a token's binding.
 */
export function tokenGroups(cluster: TokenCluster, requested: readonly string[], server: string): { groups: string[]; notes: string[] } {
  switch (cluster.kind) {
    case 'served':
      return { groups: [...requested], notes: [] };
    case 'kubeadm':
      return {
        groups: [...requested, KUBEADM_TOKEN_GROUP],
        notes: [
          `kubeadm's RBAC and not kubeboot's is applied here: the token carries group ${KUBEADM_TOKEN_GROUP}, the only one kubeadm lets create CSRs (kubeadm:kubelet-bootstrap) and read kube-system/kubeadm-config`,
        ],
      };
    case 'unserved':
      throw new UnservedClusterError(server, requested);
    case 'unknown':
      return {
        groups: [...requested],
        notes: [
          `warning: could not ask whether a bootstrap token may create its CSR here (${cluster.why}); made the token for kubeboot's RBAC (${RBAC_COMMAND}): on a kubeadm cluster without it, make one with --groups ${KUBEADM_TOKEN_GROUP}`,
        ],
      };
  }
}

/**
 * What to say about who will approve the new token's kubelet client CSRs.
 * Bound (`--node`, `--pool`) but its groups auto-approved by
 * kube-controller-manager (`certificatesigningrequests/nodeclient`,
 * kubeadm:node-autoapprove-bootstrap for kubeadm's group): it approves any
 * `system:node:*` name from it, so the binding holds nothing. Unbound and
 * not auto-approved (kubeboot's RBAC as shipped): only an approver with the
 * unsafe opt-in gives it a kubelet identity, which the admin should know
 * before booting a pool with it.
 */
export function approvalNotes(autoApproved: Finding<boolean>, bound: boolean): string[] {
  const kcm = 'found' in autoApproved ? autoApproved.found : null;
  if (bound)
    return kcm === true
      ? [
          'warning: kube-controller-manager approves kubelet client CSRs from this token for any node name (its groups may create certificatesigningrequests/nodeclient, as kubeadm:node-autoapprove-bootstrap grants kubeadm\'s group): the --node/--pool binding holds once that ClusterRoleBinding is gone (docs/node-identity.md, "Migrating off")',
        ]
      : [];
  // Not known (the admin may not ask): nothing claimed, as for a bound token.
  return kcm !== false
    ? []
    : [
        'warning: this token is bound to no node name: kubeboot approver refuses its kubelet client CSRs unless it runs with --unsafe-approve-unbound-tokens; bind it with --node NAME or --pool PREFIX --max-nodes N (docs/node-identity.md)',
      ];
}

/** How kube-proxy gets its credential: from a DaemonSet's ServiceAccount (kubeadm's), or on the node (kubeboot's kube-proxy identity). */
export type KubeProxyRun = 'daemonset' | 'node';

/**
 * Whether the node keeps a kube-proxy certificate: false where kube-proxy
 * runs as a DaemonSet (its CSR would wait for an approval nothing gives),
 * undefined to leave the node's own setting. `run` null: the cluster was
 * not asked (every value was given). `explicit`: the admin's
 * `--set kubeProxy.enabled=…`, which wins.
 */
export function nodeKubeProxy(
  run: Finding<KubeProxyRun> | null,
  explicit: boolean | undefined,
): { enabled: false | undefined; notes: string[] } {
  if (run === null) return { enabled: undefined, notes: [] };
  if ('unknown' in run) {
    return {
      enabled: undefined,
      notes:
        explicit === undefined
          ? [
              `warning: could not tell whether kube-proxy runs as DaemonSet ${KUBE_PROXY_DAEMONSET} (${run.unknown}); the node also keeps a kube-proxy certificate: if it does, join with --no-kube-proxy (user-data: --set kubeProxy.enabled=false)`,
            ]
          : [],
    };
  }
  if (run.found === 'node') return { enabled: undefined, notes: [] };
  if (explicit === true)
    return {
      enabled: undefined,
      notes: [
        `warning: kube-proxy runs as DaemonSet ${KUBE_PROXY_DAEMONSET} here, yet kubeProxy.enabled=true: the node waits for a kube-proxy CSR that only kubeboot approver approves`,
      ],
    };
  if (explicit === false) return { enabled: false, notes: [] };
  return {
    enabled: false,
    notes: [
      `kube-proxy runs as DaemonSet ${KUBE_PROXY_DAEMONSET} with its own ServiceAccount: the node keeps no kube-proxy certificate (--no-kube-proxy)`,
    ],
  };
}
