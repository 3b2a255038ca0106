/**
 * What the admin commands ask the cluster when they make what a node joins
 * with (`kubeboot token`, `user-data`/`join-command --create-token`): the
 * bootstrap token Secrets in kube-system and their bindings in `kubeboot`
 * (agent/kube/join-bindings.ts), what a token may do (SubjectAccessReview),
 * how kube-proxy runs. The decisions on what comes back are agent/join/token.ts's
 * and agent/join/cluster-side.ts's.
 */
import { BOOTSTRAPPERS_GROUP } from '../approver/policy.js';
import { ApiError, ExitCode, InputError, KubebootError } from '../errors.js';
import type { ApiResponse } from '../kube/client.js';
import {
  BINDING_LABEL,
  BINDINGS_CONFIGMAPS,
  BINDINGS_NAMESPACE,
  bindingConfigMap,
  bindingName,
  parseBinding,
  parseReplacements,
  REPLACEMENTS,
  type TokenBinding,
} from '../kube/join-bindings.js';
import { excerpt } from '../text.js';
import { namespaceMissing, type Admin } from './admin.js';
import {
  approvalNotes,
  KUBEADM_TOKEN_GROUP,
  tokenCluster,
  tokenGroups,
  type CsrAccess,
  type Finding,
  type KubeProxyRun,
} from './cluster-side.js';
import {
  generateToken,
  nodeNameProblem,
  secretName,
  summarize,
  tokenSecret,
  TOKEN_NAMESPACE,
  TOKEN_SECRET_TYPE,
  type BindingSpec,
  type NewToken,
  type TokenSpec,
  type TokenSummary,
} from './token.js';

const SECRETS = `/api/v1/namespaces/${TOKEN_NAMESPACE}/secrets`;

/**
 * Makes a token, bound when `binding` is given. The binding is written first:
 * a binding without its token is harmless, a token without its binding would
 * be unbound. `notes`: what the admin should know (for stderr).
 */
export async function createToken(
  admin: Admin,
  spec: TokenSpec,
  now: Date,
  binding: BindingSpec | null = null,
  token: NewToken = generateToken(),
): Promise<{ token: NewToken; summary: TokenSummary; notes: string[] }> {
  const notes: string[] = [];
  if (binding !== null) {
    if ('names' in binding) {
      // The host the admin reaches the API server by is one of its names: never a node's.
      const host = new URL(admin.kubeconfig.server).hostname.replace(/^\[|\]$/g, '');
      for (const name of binding.names) {
        const problem = nodeNameProblem(name, [host]);
        if (problem !== null) throw new InputError('command line', '--node', problem);
        notes.push(...(await takeoverNotes(admin, name)));
      }
    }
    const made = await admin.client.request('POST', BINDINGS_CONFIGMAPS, { body: bindingConfigMap(token.id, binding), accept: [404] });
    if (made.status === 404) throw namespaceMissing('the token would have no binding, so no token was made');
  }
  let res: ApiResponse<{ metadata?: { name?: string }; data?: Record<string, string> }>;
  try {
    res = await admin.client.request('POST', SECRETS, { body: tokenSecret(token, spec, now) });
  } catch (err) {
    if (binding !== null) await undoBinding(admin, token.id, err);
    throw err;
  }
  const summary = summarize(res.body);
  if (summary === null)
    throw new KubebootError(`the API server returned bootstrap token Secret ${secretName(token.id)} without its token-id`);
  return { token, summary, notes };
}

/**
 * createToken with the groups this cluster needs: kubeadm's where only it
 * may create CSRs, none made where nothing may (agent/join/cluster-side.ts).
 * The authorizer is asked, not the bindings read, so a cluster's own RBAC
 * for one of the groups counts as well.
 */
export async function createTokenForCluster(
  admin: Admin,
  spec: TokenSpec,
  now: Date,
  binding: BindingSpec | null = null,
): Promise<{ token: NewToken; summary: TokenSummary; notes: string[] }> {
  const token = generateToken();
  const access = await finding(async (): Promise<CsrAccess> => {
    const requested = await tokenMay(admin, token.id, spec.groups);
    const asKubeadm = requested || spec.groups.includes(KUBEADM_TOKEN_GROUP);
    return { requested, withKubeadmGroup: asKubeadm ? null : await tokenMay(admin, token.id, [...spec.groups, KUBEADM_TOKEN_GROUP]) };
  });
  const planned = tokenGroups(tokenCluster(access), spec.groups, admin.kubeconfig.server);
  const autoApproved = await finding(() => tokenMay(admin, token.id, planned.groups, 'nodeclient'));
  const created = await createToken(admin, { ...spec, groups: planned.groups }, now, binding, token);
  return { ...created, notes: [...planned.notes, ...approvalNotes(autoApproved, binding !== null), ...created.notes] };
}

const REVIEWS = '/apis/authorization.k8s.io/v1/subjectaccessreviews';

/**
 * The authorizer's answer for token `id` in `groups`: may it create a CSR
 * (or the `nodeclient` subresource, kube-controller-manager's auto-approval
 * of a bootstrap token's kubelet client CSR, sarapprove.go)?
 */
async function tokenMay(admin: Admin, id: string, groups: readonly string[], subresource?: string): Promise<boolean> {
  const res = await admin.client.request<{ status?: { allowed?: boolean } }>('POST', REVIEWS, {
    body: {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SubjectAccessReview',
      spec: {
        user: `system:bootstrap:${id}`,
        // As the API server's bootstrap token authenticator makes them.
        groups: [BOOTSTRAPPERS_GROUP, ...groups, 'system:authenticated'],
        resourceAttributes: { group: 'certificates.k8s.io', resource: 'certificatesigningrequests', verb: 'create', subresource },
      },
    },
  });
  return res.body.status?.allowed === true;
}

/** What the cluster answered, or why it would not (an admin who may not ask, say): the caller goes on with a warning. An unreachable cluster still fails the command. */
export async function finding<T>(ask: () => Promise<T>): Promise<Finding<T>> {
  try {
    return { found: await ask() };
  } catch (err) {
    if (err instanceof ApiError) return { unknown: excerpt(err.message) };
    throw err;
  }
}

/**
 * The Secret's create failed: remove the binding. When the answer was lost
 * (no ApiError), the Secret may exist after all: delete it first, or say
 * which token to delete, since a binding is never removed before its token.
 */
async function undoBinding(admin: Admin, id: string, err: unknown): Promise<void> {
  if (!(err instanceof ApiError)) {
    try {
      await admin.client.request('DELETE', `${SECRETS}/${secretName(id)}`, { accept: [404] });
    } catch {
      throw new KubebootError(
        `creating bootstrap token ${id} failed (${(err as Error).message}) and it may exist; remove it and its binding with: kubeboot token delete ${id}`,
      );
    }
  }
  await admin.client.request('DELETE', `${BINDINGS_CONFIGMAPS}/${bindingName(id)}`, { accept: [404] }).catch(() => undefined);
}

/** A live Node of that name is refused to a bootstrap token (`no-takeover`) unless marked as being replaced. Advisory: a failed read says nothing. */
async function takeoverNotes(admin: Admin, name: string): Promise<string[]> {
  try {
    const node = await admin.client.request('GET', `/api/v1/nodes/${encodeURIComponent(name)}`, { accept: [404] });
    if (node.status === 404) return [];
    const marks = await admin.client.request<{ data?: Record<string, string> }>('GET', `${BINDINGS_CONFIGMAPS}/${REPLACEMENTS}`, {
      accept: [404],
    });
    const mark = marks.status === 404 ? undefined : parseReplacements(marks.body.data).get(name);
    if (mark !== undefined && mark.claimedBy === null) return [];
    return [
      `Node ${name} exists: kubeboot approver refuses a bootstrap token its name (no-takeover) unless the machine is being replaced: kubeboot node replace ${name}`,
    ];
  } catch {
    return [];
  }
}

/** `token delete`: the Secret first (its binding must outlive it), then the binding; either may already be gone. */
export async function deleteToken(admin: Admin, id: string): Promise<string> {
  const secret = await admin.client.request('DELETE', `${SECRETS}/${secretName(id)}`, { accept: [404] });
  const binding = await admin.client.request('DELETE', `${BINDINGS_CONFIGMAPS}/${bindingName(id)}`, { accept: [404] });
  const where = `${BINDINGS_NAMESPACE}/${bindingName(id)}`;
  if (secret.status === 404 && binding.status === 404)
    throw new KubebootError(`no bootstrap token ${id} in ${TOKEN_NAMESPACE}`, ExitCode.badInput);
  if (secret.status === 404) return `binding ${where} deleted (bootstrap token ${id} was already gone)`;
  return binding.status === 404 ? `bootstrap token ${id} deleted` : `bootstrap token ${id} and its binding ${where} deleted`;
}

/** A listed token and what it may join: `binding` null for an unbound token, `{ problem }` for a binding the approver cannot use. */
export type ListedToken = TokenSummary & { binding: TokenBinding | { problem: string } | null };

interface ConfigMapList {
  items?: { metadata?: { name?: string; annotations?: Record<string, string> }; data?: Record<string, string> }[];
}

export async function listTokens(admin: Admin): Promise<{ tokens: ListedToken[]; orphans: string[] }> {
  const res = await admin.client.request<{ items?: { data?: Record<string, string> }[] }>('GET', SECRETS, {
    query: { fieldSelector: `type=${TOKEN_SECRET_TYPE}` },
  });
  const maps = await admin.client.request<ConfigMapList>('GET', BINDINGS_CONFIGMAPS, {
    query: { labelSelector: `${BINDING_LABEL}=true` },
    accept: [404],
  });
  const bindings = new Map<string, ListedToken['binding']>();
  for (const cm of maps.status === 404 ? [] : (maps.body.items ?? [])) {
    const id = /^token-([a-z0-9]{6})$/.exec(cm.metadata?.name ?? '')?.[1];
    if (id === undefined) continue;
    bindings.set(id, parseBinding(id, cm));
  }
  const tokens = (res.body.items ?? [])
    .map(summarize)
    .filter((s): s is TokenSummary => s !== null)
    .map((s) => ({ ...s, binding: bindings.get(s.id) ?? null }))
    .sort((a, b) => a.id.localeCompare(b.id));
  const listed = new Set(tokens.map((t) => t.id));
  return { tokens, orphans: [...bindings.keys()].filter((id) => !listed.has(id)).sort() };
}

/** kubeadm's kube-proxy add-on is the DaemonSet kube-system/kube-proxy (phases/addons/proxy); its pods authenticate with their ServiceAccount. */
export async function kubeProxyRunOf(admin: Admin): Promise<KubeProxyRun> {
  const res = await admin.client.request('GET', '/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy', { accept: [404] });
  return res.status === 404 ? 'node' : 'daemonset';
}
