/**
 * The records as releases before `kubeboot.io` kept them: ConfigMaps in the
 * namespace `kubeboot`, which anyone who may write ConfigMaps there (in
 * every namespace: stock controllers, add-ons) could change. Read for two
 * things only: `kubeboot records migrate` turns them into records of
 * records/kinds.ts, and the approver refuses to act on one that is still
 * there (a token whose binding is only a ConfigMap; a node a ConfigMap
 * still revokes) instead of trusting it.
 *
 * - `kubeboot/token-<id>`: data `names` (comma-separated) or `prefix`, and
 *   `max-nodes`; annotation `kubeboot.io/issued`: JSON {node: CSR uid}.
 * - `kubeboot/replacements`: data `<node>` = JSON {at, claimedBy}.
 * - `kubeboot/revocations`: data `<node>` = JSON {at, reason}.
 * - `kubeboot/inventory`: data `<node>` = `ips: ...; machine-id: ...`.
 *
 * Pure: parsing. The requests are the callers'.
 */
export const BINDINGS_NAMESPACE = 'kubeboot';
export const LEGACY_CONFIGMAPS = `/api/v1/namespaces/${BINDINGS_NAMESPACE}/configmaps`;
export const LEGACY_REPLACEMENTS = 'replacements';
export const LEGACY_REVOCATIONS = 'revocations';
export const LEGACY_INVENTORY = 'inventory';
export const ISSUED_ANNOTATION = 'kubeboot.io/issued';
export const LEGACY_BINDING_LABEL = 'kubeboot.io/token-binding';
/** What moves them. */
export const MIGRATE_COMMAND = 'kubeboot records migrate';

export function legacyBindingName(tokenId: string): string {
  return `token-${tokenId}`;
}

export interface LegacyConfigMap {
  kind?: string;
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
  data?: Record<string, string>;
}

export interface LegacyBinding {
  tokenId: string;
  names: string[];
  prefix: string | null;
  maxNodes: number;
  tokenSecretUid: string | null;
  issued: Map<string, string>;
}

/** A `token-<id>` ConfigMap's binding, or why it does not parse (then it is not migrated, and says why). */
export function parseLegacyBinding(tokenId: string, cm: LegacyConfigMap): LegacyBinding | { problem: string } {
  const data = cm.data ?? {};
  const max = Number(data['max-nodes']);
  if (!Number.isSafeInteger(max) || max < 1)
    return { problem: `max-nodes ${JSON.stringify(data['max-nodes'] ?? null)} is not a whole number ≥ 1` };
  let parsed: unknown;
  try {
    parsed = JSON.parse(cm.metadata.annotations?.[ISSUED_ANNOTATION] ?? '{}');
  } catch {
    return { problem: `${ISSUED_ANNOTATION} is not JSON` };
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed) || !Object.values(parsed).every((v) => typeof v === 'string'))
    return { problem: `${ISSUED_ANNOTATION} is not a map of node name to CSR uid` };
  const names =
    data.names
      ?.split(',')
      .map((n) => n.trim())
      .filter(Boolean) ?? [];
  const prefix = data.prefix ?? null;
  if (names.length > 0 && prefix !== null) return { problem: 'both names and prefix are set' };
  if (names.length === 0 && (prefix === null || prefix === '')) return { problem: 'neither names nor prefix is set' };
  return {
    tokenId,
    names,
    prefix: names.length > 0 ? null : prefix,
    maxNodes: names.length > 0 ? Math.min(max, names.length) : max,
    tokenSecretUid: cm.metadata.annotations?.['kubeboot.io/token-secret-uid'] ?? null,
    issued: new Map(Object.entries(parsed as Record<string, string>)),
  };
}

/** JSON entries of a ConfigMap's data, node → object; an entry that does not parse is `null`. */
export function legacyEntries(data: Record<string, string> | undefined): Map<string, Record<string, unknown> | null> {
  const out = new Map<string, Record<string, unknown> | null>();
  for (const [node, raw] of Object.entries(data ?? {})) {
    try {
      const v = JSON.parse(raw) as unknown;
      out.set(node, v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null);
    } catch {
      out.set(node, null);
    }
  }
  return out;
}

/** Why a legacy record is not trusted, naming it and the command that moves it. */
export function unmigrated(name: string): string {
  return `${BINDINGS_NAMESPACE}/${name} is a ConfigMap record of an earlier release, which whoever may write ConfigMaps could have written: not trusted; move it with: ${MIGRATE_COMMAND}`;
}
