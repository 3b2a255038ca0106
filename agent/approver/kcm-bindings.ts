/**
 * Whether kube-controller-manager still approves kubelet client CSRs by
 * itself. Its csrapproving controller approves any `system:node:*` client
 * CSR whose requester may `create` certificatesigningrequests/nodeclient
 * (selfnodeclient for a renewal), on a check of the name's prefix only
 * (sarapprove.go): while the authorizer allows that, `--approve-kubelet-client`
 * refusing a CSR, and `kubeboot node revoke`, stop nothing. So the
 * authorizer is asked (SubjectAccessReview), as kube-controller-manager asks
 * it, for the groups every requester of such a CSR is in: a grant through
 * any role, stock (kubeadm's `kubeadm:node-autoapprove-*`, kubeboot's
 * tls-bootstrap-rbac.yaml) or custom (`approve-node-client-renewal-csr` of
 * the 1.7 TLS bootstrapping docs), is seen. The bindings that grant it are
 * then looked for and named as a hint for the fix. Said at start, on
 * /readyz (which stays ready: the approver still approves, it is just not
 * the only one) and by `node revoke`.
 */
import type { KubeClient } from '../kube/client.js';
import { listAll } from '../kube/list.js';
import { excerpt } from '../text.js';
import type { Clock } from '../time/clock.js';

/** matches kubeadm: the extra group of the tokens `kubeadm token create` makes by default. */
export const KUBEADM_TOKEN_GROUP = 'system:bootstrappers:kubeadm:default-node-token';

/**
 * Who files kubelet client CSRs, as the groups the API server gives them, and
 * what kube-controller-manager asks about each (sarapprove.go:
 * `selfnodeclient` for a node renewing itself, `nodeclient` for anyone).
 */
export const KCM_REQUESTERS: readonly { groups: readonly string[]; subresources: readonly string[] }[] = [
  { groups: ['system:bootstrappers', 'system:authenticated'], subresources: ['nodeclient'] },
  { groups: ['system:bootstrappers', KUBEADM_TOKEN_GROUP, 'system:authenticated'], subresources: ['nodeclient'] },
  { groups: ['system:nodes', 'system:authenticated'], subresources: ['nodeclient', 'selfnodeclient'] },
];

/** One grant the authorizer confirmed: these groups may create certificatesigningrequests/<subresource>. */
export interface KcmGrant {
  groups: readonly string[];
  subresource: string;
}

export interface KcmAutoApproval {
  /** What the SubjectAccessReviews allowed; empty when kube-controller-manager approves no kubelet client CSR. */
  grants: KcmGrant[];
  /** The ClusterRoleBindings found to grant it (a hint), or why they could not be looked for. */
  bindings: string[] | { problem: string };
}

const SARS = '/apis/authorization.k8s.io/v1/subjectaccessreviews';
const CLUSTER_ROLES = '/apis/rbac.authorization.k8s.io/v1/clusterroles';
const CLUSTER_ROLE_BINDINGS = '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings';
const CSR_GROUP = 'certificates.k8s.io';
/** How long a look is reused by /readyz (six SubjectAccessReviews each). */
const TTL_MS = 60_000;

async function allowed(client: KubeClient, groups: readonly string[], subresource: string, signal?: AbortSignal): Promise<boolean> {
  const body = {
    apiVersion: 'authorization.k8s.io/v1',
    kind: 'SubjectAccessReview',
    spec: {
      groups,
      resourceAttributes: { group: CSR_GROUP, resource: 'certificatesigningrequests', verb: 'create', subresource },
    },
  };
  const res = await client.request<{ status?: { allowed?: boolean } }>('POST', SARS, { body, signal });
  return res.body.status?.allowed === true;
}

/** Every grant of KCM_REQUESTERS the authorizer confirms, then the bindings behind them (only then listed). */
export async function kcmAutoApproval(client: KubeClient, signal?: AbortSignal): Promise<KcmAutoApproval> {
  const asked = KCM_REQUESTERS.flatMap(({ groups, subresources }) => subresources.map((subresource) => ({ groups, subresource })));
  const answers = await Promise.all(asked.map((g) => allowed(client, g.groups, g.subresource, signal)));
  const allowedAll = asked.filter((_, i) => answers[i]);
  // kubeadm's tokens are in system:bootstrappers too: their grant is news only when the group's own is not there.
  const grants = allowedAll.filter(
    (g) =>
      !allowedAll.some(
        (o) =>
          o !== g && o.subresource === g.subresource && o.groups.length < g.groups.length && o.groups.every((x) => g.groups.includes(x)),
      ),
  );
  if (grants.length === 0) return { grants, bindings: [] };
  try {
    const roles = await listAll<ClusterRole>(client, CLUSTER_ROLES, { kind: 'ClusterRole', ...(signal ? { signal } : {}) });
    const bindings = await listAll<ClusterRoleBinding>(client, CLUSTER_ROLE_BINDINGS, {
      kind: 'ClusterRoleBinding',
      ...(signal ? { signal } : {}),
    });
    return { grants, bindings: grantingBindings(roles, bindings, grants) };
  } catch (err) {
    return { grants, bindings: { problem: `could not list ClusterRoles and ClusterRoleBindings: ${(err as Error).message}` } };
  }
}

interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  verbs?: string[];
  resourceNames?: string[];
}
export interface ClusterRole {
  metadata?: { name?: string };
  rules?: PolicyRule[] | null;
}
export interface ClusterRoleBinding {
  metadata?: { name?: string };
  roleRef?: { kind?: string; name?: string };
  subjects?: { kind?: string; name?: string }[] | null;
}

const has = (values: readonly string[] | undefined, value: string): boolean =>
  values?.includes(value) === true || values?.includes('*') === true;

/** Whether an RBAC rule allows `create` on certificatesigningrequests/<subresource> (wildcards included). */
function grants(rule: PolicyRule, subresource: string): boolean {
  return (
    has(rule.apiGroups, CSR_GROUP) &&
    has(rule.verbs, 'create') &&
    (rule.resourceNames ?? []).length === 0 &&
    (rule.resources ?? []).some(
      (r) => r === '*' || r === `certificatesigningrequests/${subresource}` || r === 'certificatesigningrequests/*',
    )
  );
}

/** The ClusterRoleBindings that give one of the grants' groups a ClusterRole allowing its subresource, sorted. */
export function grantingBindings(
  roles: readonly ClusterRole[],
  bindings: readonly ClusterRoleBinding[],
  found: readonly KcmGrant[],
): string[] {
  const names = new Set<string>();
  for (const b of bindings) {
    if (b.roleRef?.kind !== 'ClusterRole' || !b.metadata?.name) continue;
    const role = roles.find((r) => r.metadata?.name === b.roleRef?.name);
    const groups = new Set((b.subjects ?? []).filter((s) => s.kind === 'Group').map((s) => s.name ?? ''));
    const granting = found.some(
      (g) => g.groups.some((group) => groups.has(group)) && (role?.rules ?? []).some((rule) => grants(rule, g.subresource)),
    );
    if (granting) names.add(b.metadata.name);
  }
  return [...names].sort();
}

/** What to tell the operator, or null when kube-controller-manager approves no kubelet client CSR. */
export function kcmAutoApprovalProblem(found: KcmAutoApproval): string | null {
  if (found.grants.length === 0) return null;
  // Each requester by its most specific group (kubeadm's token group, not system:bootstrappers).
  const said = found.grants.map(
    (g) => `${g.groups.filter((x) => x !== 'system:authenticated').at(-1)} may create certificatesigningrequests/${g.subresource}`,
  );
  const { bindings } = found;
  const fix = !Array.isArray(bindings)
    ? `; ${bindings.problem}`
    : bindings.length > 0
      ? `; remove the grant: kubectl delete clusterrolebinding ${bindings.map((n) => excerpt(n)).join(' ')}`
      : '; no ClusterRoleBinding of a group was found to grant it (look for a binding to a user, or another authorizer)';
  return `kube-controller-manager still approves kubelet client CSRs on a name-prefix check, whatever this approver refuses or revokes: the authorizer says ${said.join(', ')}${fix}`;
}

/**
 * The last look for /readyz's text, looked at again in the background when
 * asked and older than a minute, so removing the grant shows there without
 * a restart; /readyz never waits for the SubjectAccessReviews.
 */
export function kcmAutoApprovalMonitor(
  read: () => Promise<KcmAutoApproval>,
  clock: Clock,
): { look(): Promise<KcmAutoApproval>; detail(): string } {
  let last: { at: number; text: string } | null = null;
  let inFlight: Promise<KcmAutoApproval> | null = null;
  const look = (): Promise<KcmAutoApproval> => {
    inFlight ??= read()
      .then(
        (found) => {
          last = {
            at: clock.now().getTime(),
            text: kcmAutoApprovalProblem(found) ?? 'the authorizer lets no requester have kube-controller-manager approve them',
          };
          return found;
        },
        (err: unknown) => {
          last = { at: clock.now().getTime(), text: `could not ask the authorizer (SubjectAccessReview): ${(err as Error).message}` };
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
