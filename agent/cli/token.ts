/**
 * `kubeboot token create|list|delete`: bootstrap tokens for joining nodes,
 * as `kubeadm token` makes them. create prints only the token; list never
 * prints a secret. `--node`/`--pool` bind the token to what it may join: a
 * ConfigMap `kubeboot/token-<id>` (agent/kube/join-bindings.ts) that
 * `kubeboot approver` reads, written before the token exists and deleted
 * after it, so no token is ever without its binding.
 */
import { BOOTSTRAPPERS_GROUP } from '../approver/policy.js';
import { ApiError, ExitCode, InputError, KubebootError } from '../errors.js';
import { adminClient, explainAdminError, type Admin } from '../join/admin.js';
import { approvalNotes, KUBEADM_TOKEN_GROUP, tokenCluster, tokenGroups, type CsrAccess, type Finding } from '../join/cluster-side.js';
import {
  bindingSpecFrom,
  bindingView,
  generateToken,
  nodeNameProblem,
  parseTokenId,
  secretName,
  summarize,
  tokenSecret,
  tokenSpecFrom,
  TOKEN_NAMESPACE,
  TOKEN_SECRET_TYPE,
  type BindingFlags,
  type BindingSpec,
  type NewToken,
  type TokenFlags,
  type TokenSpec,
  type TokenSummary,
} from '../join/token.js';
import {
  BINDING_LABEL,
  BINDINGS_NAMESPACE,
  bindingConfigMap,
  bindingName,
  parseBinding,
  parseReplacements,
  REPLACEMENTS,
  type TokenBinding,
} from '../kube/join-bindings.js';
import type { ApiResponse } from '../kube/client.js';
import { columns, excerpt, terminalJson, terminalLines } from '../text.js';
import { systemClock } from '../time/clock.js';

export type Given = Record<string, string | string[] | boolean>;

const SECRETS = `/api/v1/namespaces/${TOKEN_NAMESPACE}/secrets`;
export const CONFIGMAPS = `/api/v1/namespaces/${BINDINGS_NAMESPACE}/configmaps`;
/** What makes the namespace `kubeboot` (and the approver's RBAC on it). */
export const MANIFESTS_COMMAND = 'kubectl apply -f /usr/share/kubeboot/manifests/ -f /usr/share/kubeboot/manifests/approver/';

/** A create in `kubeboot` answered 404: the namespace is not there. */
export function namespaceMissing(what: string): KubebootError {
  return new KubebootError(`namespace ${BINDINGS_NAMESPACE} does not exist (${what}); create it with: ${MANIFESTS_COMMAND}`);
}

export async function runToken(
  positionals: string[],
  given: Given,
  output: 'text' | 'json',
  env: Record<string, string | undefined>,
): Promise<number> {
  const [action, ...rest] = positionals;
  const expect = (n: number, usage: string) => {
    if (rest.length !== n) throw new InputError('command line', 'arguments', `usage: kubeboot token ${usage}`);
  };
  switch (action) {
    case 'create': {
      expect(
        0,
        'create [--node NAME | --pool PREFIX --max-nodes N] [--ttl D | --no-expiry] [--usages U] [--groups G] [--description TEXT]',
      );
      const spec = tokenSpecFrom(given as TokenFlags);
      const binding = bindingSpecFrom(given as BindingFlags);
      const created = await withAdmin(given, env, 'create a bootstrap token Secret in kube-system', (admin) =>
        createTokenForCluster(admin, spec, systemClock.now(), binding),
      );
      process.stdout.write(
        output === 'json' ? terminalJson({ token: created.token.token, ...created.summary }) : `${created.token.token}\n`,
      );
      process.stderr.write(terminalLines(created.notes.map((n) => `kubeboot token: ${n}`)));
      return ExitCode.ok;
    }
    case 'list': {
      expect(0, 'list');
      const listed = await withAdmin(given, env, 'list bootstrap tokens in kube-system', listTokens);
      process.stdout.write(output === 'json' ? terminalJson(listed.tokens) : renderTokenTable(listed));
      return ExitCode.ok;
    }
    case 'delete': {
      expect(1, 'delete ID');
      const id = parseTokenId(rest[0] as string);
      const said = await withAdmin(given, env, `delete bootstrap token ${id}`, (admin) => deleteToken(admin, id));
      process.stdout.write(`${said}\n`);
      return ExitCode.ok;
    }
    default:
      throw new InputError(
        'command line',
        'token',
        action === undefined ? 'expected create, list or delete' : `unknown action ${JSON.stringify(action)} (want create, list, delete)`,
      );
  }
}

/** Opens the admin client, runs `act`, closes it, and words API failures as one line. */
export async function withAdmin<T>(
  given: Given,
  env: Record<string, string | undefined>,
  doing: string,
  act: (admin: Admin) => Promise<T>,
): Promise<T> {
  const admin = await adminClient(typeof given.kubeconfig === 'string' ? given.kubeconfig : undefined, env);
  try {
    return await act(admin);
  } catch (err) {
    throw explainAdminError(err, admin, doing);
  } finally {
    await admin.client.close();
  }
}

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
    const made = await admin.client.request('POST', CONFIGMAPS, { body: bindingConfigMap(token.id, binding), accept: [404] });
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
  await admin.client.request('DELETE', `${CONFIGMAPS}/${bindingName(id)}`, { accept: [404] }).catch(() => undefined);
}

/** A live Node of that name is refused to a bootstrap token (`no-takeover`) unless marked as being replaced. Advisory: a failed read says nothing. */
async function takeoverNotes(admin: Admin, name: string): Promise<string[]> {
  try {
    const node = await admin.client.request('GET', `/api/v1/nodes/${encodeURIComponent(name)}`, { accept: [404] });
    if (node.status === 404) return [];
    const marks = await admin.client.request<{ data?: Record<string, string> }>('GET', `${CONFIGMAPS}/${REPLACEMENTS}`, { accept: [404] });
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
  const binding = await admin.client.request('DELETE', `${CONFIGMAPS}/${bindingName(id)}`, { accept: [404] });
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
  const maps = await admin.client.request<ConfigMapList>('GET', CONFIGMAPS, {
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

/** Every cell is the Secret's or ConfigMap's text (anyone who can write Secrets in kube-system wrote it): columns() bounds and escapes it. */
export function renderTokenTable({ tokens, orphans }: { tokens: ListedToken[]; orphans: string[] }): string {
  const rows = [['ID', 'EXPIRES', 'USAGES', 'GROUPS', 'JOINS', 'SPENT', 'DESCRIPTION']];
  for (const t of tokens) {
    const view = bindingView(t.binding);
    rows.push([
      t.id,
      t.expires ?? '<never>',
      t.usages.join(',') || '<none>',
      t.groups.join(',') || '<none>',
      view.joins,
      view.spent,
      t.description ?? '',
    ]);
  }
  const lines = columns(rows);
  if (orphans.length > 0)
    lines.push(`bindings whose token is gone (kubeboot token delete ID removes one): ${orphans.map((id) => excerpt(id)).join(', ')}`);
  return terminalLines(lines);
}
