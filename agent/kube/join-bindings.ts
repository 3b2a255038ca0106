/**
 * What a bootstrap token may join, and which nodes are being replaced or are
 * revoked: the records `kubeboot token create --node/--pool`, `kubeboot node
 * replace|revoke` write and `kubeboot approver` reads before it approves a
 * kubelet client CSR. They live as ConfigMaps in the namespace `kubeboot`,
 * never in a Secret: a token's id is public (its user is
 * `system:bootstrap:<id>`), and reading `kube-system/bootstrap-token-<id>`
 * would need `get secrets` in kube-system, which RBAC cannot narrow to ids
 * not yet known. The approver may read and update ConfigMaps in `kubeboot`
 * and nothing in kube-system.
 *
 * - `kubeboot/token-<id>`: one token's binding. data `names` (comma-separated
 *   exact node names) or `prefix` (names `<prefix><anything>`), and
 *   `max-nodes`; annotation `kubeboot.io/issued`, written by the approver
 *   with the resourceVersion it read (so two approvers never both spend the
 *   last name): JSON {node name: uid of the CSR it was spent on}. The same
 *   CSR decided again (an approval write that failed) still passes; another
 *   CSR for a spent name never does.
 * - `kubeboot/replacements`: data `<node>` = JSON {at, claimedBy}: the admin
 *   marked that existing Node as being replaced (`at`); the first bootstrap
 *   CSR for its name claims the mark (`claimedBy`: its uid, written with the
 *   resourceVersion read) and every other one is refused.
 * - `kubeboot/revocations`: data `<node>` = JSON {at, reason}: the node's
 *   renewals are denied; its identity dies at its certificate's notAfter.
 *
 * Pure: parsing and rendering. The requests are the callers'.
 */
export const BINDINGS_NAMESPACE = 'kubeboot';
/** Where the bindings, replacements and revocations are read and written. */
export const BINDINGS_CONFIGMAPS = `/api/v1/namespaces/${BINDINGS_NAMESPACE}/configmaps`;
export const REPLACEMENTS = 'replacements';
export const REVOCATIONS = 'revocations';
export const ISSUED_ANNOTATION = 'kubeboot.io/issued';
export const BINDING_LABEL = 'kubeboot.io/token-binding';

export function bindingName(tokenId: string): string {
  return `token-${tokenId}`;
}

export type TokenBinding =
  /** Exactly these names (a node-bound token: one name, max 1). */
  | { kind: 'names'; tokenId: string; names: string[]; maxNodes: number; issued: Record<string, string> }
  /** Any name starting with `prefix`, at most `maxNodes` of them (an autoscaling group's pool). */
  | { kind: 'prefix'; tokenId: string; prefix: string; maxNodes: number; issued: Record<string, string> };

interface ConfigMapLike {
  metadata?: { name?: string; annotations?: Record<string, string>; resourceVersion?: string };
  data?: Record<string, string>;
}

/** The binding a ConfigMap holds, or why it holds none that can be trusted (then nothing is approved from it). */
export function parseBinding(tokenId: string, cm: ConfigMapLike): TokenBinding | { problem: string } {
  const data = cm.data ?? {};
  const max = Number(data['max-nodes']);
  if (!Number.isSafeInteger(max) || max < 1)
    return { problem: `max-nodes ${JSON.stringify(data['max-nodes'] ?? null)} is not a whole number ≥ 1` };
  let parsed: unknown = {};
  try {
    parsed = JSON.parse(cm.metadata?.annotations?.[ISSUED_ANNOTATION] ?? '{}');
  } catch {
    return { problem: `${ISSUED_ANNOTATION} is not JSON` };
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed) || !Object.values(parsed).every((v) => typeof v === 'string'))
    return { problem: `${ISSUED_ANNOTATION} is not a map of node name to CSR uid` };
  const issued = parsed as Record<string, string>;
  const names =
    data.names
      ?.split(',')
      .map((n) => n.trim())
      .filter(Boolean) ?? [];
  const prefix = data.prefix;
  if (names.length > 0 && prefix !== undefined) return { problem: 'both names and prefix are set' };
  if (names.length > 0) return { kind: 'names', tokenId, names, maxNodes: Math.min(max, names.length), issued };
  if (prefix !== undefined && prefix !== '') return { kind: 'prefix', tokenId, prefix, maxNodes: max, issued };
  return { problem: 'neither names nor prefix is set' };
}

/**
 * Pure: whether `binding` lets its token have `name` for the CSR `csrUid`
 * now, or why not. A name already issued from it is never issued again,
 * except to the very CSR it was spent on.
 */
export function bindingAllows(binding: TokenBinding, name: string, csrUid: string): string | null {
  const spent = `token ${binding.tokenId}`;
  const onName = binding.issued[name];
  if (onName !== undefined) return onName === csrUid ? null : `${spent} was already spent on ${name}`;
  const count = Object.keys(binding.issued).length;
  if (count >= binding.maxNodes) return `${spent} is spent: it joined ${count} of its ${binding.maxNodes} node(s)`;
  if (binding.kind === 'names') return binding.names.includes(name) ? null : `${spent} joins only ${binding.names.join(', ')}`;
  return name.startsWith(binding.prefix) && name.length > binding.prefix.length ? null : `${spent} joins only names ${binding.prefix}*`;
}

/** The ConfigMap `kubeboot token create --node/--pool` writes for a new token. */
export function bindingConfigMap(
  tokenId: string,
  spec: { names: string[] } | { prefix: string; maxNodes: number },
  ownerSecretUid?: string,
): object {
  const data: Record<string, string> =
    'names' in spec
      ? { 'token-id': tokenId, names: spec.names.join(','), 'max-nodes': String(spec.names.length) }
      : { 'token-id': tokenId, prefix: spec.prefix, 'max-nodes': String(spec.maxNodes) };
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: bindingName(tokenId),
      namespace: BINDINGS_NAMESPACE,
      labels: { [BINDING_LABEL]: 'true', 'app.kubernetes.io/part-of': 'kubeboot' },
      annotations: { [ISSUED_ANNOTATION]: '{}', ...(ownerSecretUid ? { 'kubeboot.io/token-secret-uid': ownerSecretUid } : {}) },
    },
    data,
  };
}

export interface Replacement {
  at: string;
  /** Uid of the CSR that claimed the mark; null while unclaimed. */
  claimedBy: string | null;
}

/** data of `kubeboot/replacements` → node → mark; an entry that does not parse is no mark (fail closed: no takeover). */
export function parseReplacements(data: Record<string, string> | undefined): Map<string, Replacement> {
  const out = new Map<string, Replacement>();
  for (const [node, raw] of Object.entries(data ?? {})) {
    try {
      const r = JSON.parse(raw) as Partial<Replacement>;
      if (typeof r.at === 'string') out.set(node, { at: r.at, claimedBy: typeof r.claimedBy === 'string' ? r.claimedBy : null });
    } catch {
      // not a mark
    }
  }
  return out;
}

export interface Revocation {
  at: string;
  reason: string;
}

/** data of `kubeboot/revocations` → node → revocation; entries that do not parse count as revoked (fail closed). */
export function parseRevocations(data: Record<string, string> | undefined): Map<string, Revocation> {
  const out = new Map<string, Revocation>();
  for (const [node, raw] of Object.entries(data ?? {})) {
    try {
      const r = JSON.parse(raw) as Partial<Revocation>;
      out.set(node, { at: typeof r.at === 'string' ? r.at : '', reason: typeof r.reason === 'string' ? r.reason : '' });
    } catch {
      out.set(node, { at: '', reason: 'unreadable entry' });
    }
  }
  return out;
}
