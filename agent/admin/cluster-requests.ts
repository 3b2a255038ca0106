/**
 * What the admin commands ask the cluster when they make what a node joins
 * with (`kubeboot token`, `user-data`/`join-command --create-token`): the
 * bootstrap token Secrets in kube-system and their bindings (TokenBinding
 * records, agent/records/bindings.ts), what a token may do (SubjectAccessReview),
 * how kube-proxy runs. The decisions on what comes back are agent/admin/token.ts's
 * and agent/admin/cluster-side.ts's.
 */
import { BOOTSTRAPPERS_GROUP } from '../approver/policy.js';
import { ApiError, ExitCode, InputError, KubebootError } from '../errors.js';
import type { ApiResponse } from '../kube/client.js';
import { bindingName, bindingRecord, bindingRef, parseBinding, type TokenBinding } from '../records/bindings.js';
import { createRecord, deleteRecord, listRecords, patchSpec, readRecord } from '../records/requests.js';
import { excerpt } from '../text.js';
import type { Admin } from './connect.js';
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
      }
    }
    const made = await createRecord(
      admin.client,
      'tokenbindings',
      bindingRecord(token.id, binding),
      'the token would have no binding, so no token was made',
    );
    if (made === null)
      throw new KubebootError(
        `a binding ${bindingRef(token.id)} exists already; no token was made (delete it with: kubeboot token delete ${token.id})`,
      );
  }
  let res: ApiResponse<{ metadata?: { name?: string; uid?: string }; data?: Record<string, string> }>;
  try {
    res = await admin.client.request('POST', SECRETS, { body: tokenSecret(token, spec, now) });
  } catch (err) {
    if (binding !== null) await undoBinding(admin, token.id, err);
    throw err;
  }
  const summary = summarize(res.body);
  if (summary === null)
    throw new KubebootError(`the API server returned bootstrap token Secret ${secretName(token.id)} without its token-id`);
  if (binding !== null) {
    // Until the binding names its Secret the approver approves nothing from it: a binding whose token was never made stays unusable.
    const bound = await readRecord(admin.client, 'tokenbindings', bindingName(token.id));
    const uid = res.body.metadata?.uid ?? '';
    if (bound === null || uid === '' || !(await patchSpec(admin.client, bound, 'tokenbindings', { tokenSecretUID: uid }))) {
      await deleteToken(admin, token.id).catch(() => undefined);
      throw new KubebootError(`the binding ${bindingRef(token.id)} changed or went while its token was made; nothing was kept, try again`);
    }
    if ('names' in binding) for (const name of binding.names) notes.push(...(await takeoverNotes(admin, name, token.id)));
  }
  return { token, summary, notes };
}

/**
 * createToken with the groups this cluster needs: kubeadm's where only it
 * may create CSRs, none made where nothing may (agent/admin/cluster-side.ts).
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
  await deleteRecord(admin.client, 'tokenbindings', bindingName(id)).catch(() => undefined);
}

/**
 * A live Node of that name is refused to a bootstrap token (`no-takeover`)
 * unless marked as being replaced for that token: an unclaimed mark bound to
 * no token yet is bound to this one. Advisory: a failed read says nothing.
 */
async function takeoverNotes(admin: Admin, name: string, tokenId: string): Promise<string[]> {
  try {
    const mark = await readRecord(admin.client, 'nodereplacements', name);
    if (mark !== null && !mark.status?.claimedBy) {
      const markedFor = mark.spec?.tokenID ?? '';
      if (markedFor === tokenId) return [];
      if (markedFor === '' && (await patchSpec(admin.client, mark, 'nodereplacements', { tokenID: tokenId })))
        return [`the replacement mark of node ${name} is now for this token: its first CSR for ${name} claims it`];
      return [
        `node ${name} is marked as being replaced for token ${markedFor}, not this one: kubeboot node replace ${name} --for-token ${tokenId} gives the mark to this one`,
      ];
    }
    const node = await admin.client.request('GET', `/api/v1/nodes/${encodeURIComponent(name)}`, { accept: [404] });
    if (node.status === 404 && (await readRecord(admin.client, 'nodeclaims', name)) === null) return [];
    return [
      `${node.status === 404 ? `the name ${name} was spent on a token before` : `Node ${name} exists`}: kubeboot approver refuses it to a bootstrap token (${node.status === 404 ? 'token-bound' : 'no-takeover'}) unless the machine is being replaced: kubeboot node replace ${name} --for-token ${tokenId}`,
    ];
  } catch {
    return [];
  }
}

/** `token delete`: the Secret first (its binding must outlive it), then the binding; either may already be gone. The names it spent stay spent. */
export async function deleteToken(admin: Admin, id: string): Promise<string> {
  const secret = await admin.client.request('DELETE', `${SECRETS}/${secretName(id)}`, { accept: [404] });
  const binding = await deleteRecord(admin.client, 'tokenbindings', bindingName(id)).catch((err: unknown) => {
    if (err instanceof ApiError && err.status === 404) return false;
    throw err;
  });
  const where = bindingRef(id);
  if (secret.status === 404 && !binding) throw new KubebootError(`no bootstrap token ${id} in ${TOKEN_NAMESPACE}`, ExitCode.badInput);
  if (secret.status === 404) return `binding ${where} deleted (bootstrap token ${id} was already gone)`;
  return binding ? `bootstrap token ${id} and its binding ${where} deleted` : `bootstrap token ${id} deleted`;
}

/** A listed token and what it may join: `binding` null for an unbound token, `{ problem }` for a binding the approver cannot use. */
export type ListedToken = TokenSummary & { binding: TokenBinding | { problem: string } | null };

export async function listTokens(admin: Admin): Promise<{ tokens: ListedToken[]; orphans: string[] }> {
  const res = await admin.client.request<{ items?: { metadata?: { name?: string; uid?: string }; data?: Record<string, string> }[] }>(
    'GET',
    SECRETS,
    {
      query: { fieldSelector: `type=${TOKEN_SECRET_TYPE}` },
    },
  );
  const bindings = new Map<string, { secretUid: string; parsed: ListedToken['binding'] }>();
  for (const record of await listRecords(admin.client, 'tokenbindings')) {
    const id = record.metadata.name;
    bindings.set(id, { secretUid: record.spec?.tokenSecretUID ?? '', parsed: parseBinding(id, record) });
  }
  const tokens = (res.body.items ?? [])
    .map((secret) => ({ summary: summarize(secret), uid: secret.metadata?.uid ?? '' }))
    .filter((s): s is { summary: TokenSummary; uid: string } => s.summary !== null)
    .map(({ summary, uid }) => {
      const bound = bindings.get(summary.id);
      // The approver cannot read Secrets: the admin's listing is where a binding that outlived its token shows.
      const stale = bound !== undefined && bound.secretUid !== '' && bound.secretUid !== uid;
      return {
        ...summary,
        binding: bound === undefined ? null : stale ? { problem: 'made for another Secret of this id (tokenSecretUID)' } : bound.parsed,
      };
    })
    .sort((a, b) => a.id.localeCompare(b.id));
  const listed = new Set(tokens.map((t) => t.id));
  return { tokens, orphans: [...bindings.keys()].filter((id) => !listed.has(id)).sort() };
}

/** kubeadm's kube-proxy add-on is the DaemonSet kube-system/kube-proxy (phases/addons/proxy); its pods authenticate with their ServiceAccount. */
export async function kubeProxyRunOf(admin: Admin): Promise<KubeProxyRun> {
  const res = await admin.client.request('GET', '/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy', { accept: [404] });
  return res.status === 404 ? 'node' : 'daemonset';
}
