/**
 * The records node identity is decided from, as objects of kubeboot's own
 * API group `kubeboot.io` (CustomResourceDefinitions in
 * packaging/manifests/approver/node-identity.yaml), every one cluster-scoped:
 * no namespace's admin or edit role reaches them, and no aggregated role
 * picks them up (their CRDs carry no aggregation label). Only who may write
 * `kubeboot.io` objects cluster-wide (the cluster admin, and
 * kube-controller-manager's wildcard controllers) can change them; the
 * approver writes only what it spends: status of a binding or a mark, and
 * the claim of a name. Why not ConfigMaps, nor signed records:
 * docs/node-identity.md "Where the records live".
 *
 * - TokenBinding `<token id>`: what a bootstrap token may join (spec, the
 *   admin's); status.issued: the names it was spent on, and the CSR each
 *   went to (the approver's, written on the resourceVersion read).
 * - NodeClaim `<node name>`: the name is spent (spec: by which token, for
 *   which CSR). The approver creates it: a create is atomic, so a name is
 *   spent once across every binding (409: spent already).
 * - NodeReplacement `<node name>`: the admin marked that Node as being
 *   replaced, for one token (spec.tokenID); the mark's time is its
 *   metadata.creationTimestamp, set by the API server. status.claimedBy:
 *   the CSR that claimed it (the approver's).
 * - NodeRevocation `<node name>`: the node's identity is revoked (spec.reason);
 *   since metadata.creationTimestamp.
 * - Inventory `inventory`: the admin's expected nodes (records/inventory.ts).
 * - TpmEnrolment `<node name>`: the AK enrolled for a name the inventory
 *   knows by its TPM's EK alone, and the credential challenges sent for it
 *   (records/tpm-enrolment.ts). The approver creates and updates it (on the
 *   resourceVersion read); the admin deletes it to enrol the machine again.
 * - TpmBeacon `kubeboot`: the freshness beacon every TPM quote binds
 *   (records/tpm-beacon.ts). The approver's leader creates and rotates it;
 *   nodes and bootstrap tokens may only get it.
 *
 * Pure: names, paths and shapes. The requests are the callers'.
 */
export const GROUP = 'kubeboot.io';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;

export const KINDS = {
  tokenbindings: 'TokenBinding',
  nodeclaims: 'NodeClaim',
  nodereplacements: 'NodeReplacement',
  noderevocations: 'NodeRevocation',
  inventories: 'Inventory',
  tpmenrolments: 'TpmEnrolment',
  tpmbeacons: 'TpmBeacon',
} as const;
export type RecordResource = keyof typeof KINDS;
export const RECORD_RESOURCES = Object.keys(KINDS) as RecordResource[];

/** The collection of a record resource (all cluster-scoped). */
export function recordsPath(resource: RecordResource): string {
  return `/apis/${API_VERSION}/${resource}`;
}

/** How a record is named to an operator: what `kubectl get` takes (`tokenbindings.kubeboot.io/abcdef`). */
export function recordRef(resource: RecordResource, name: string): string {
  return `${resource}.${GROUP}/${name}`;
}

export interface RecordMeta {
  [field: string]: unknown;
  name: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
  labels?: Record<string, string>;
}

export interface TokenBindingObject {
  apiVersion?: string;
  kind: 'TokenBinding';
  metadata: RecordMeta;
  spec?: { tokenID?: string; names?: string[]; prefix?: string; maxNodes?: number; tokenSecretUID?: string };
  status?: { issued?: { node?: string; csrUID?: string }[] };
}

export interface NodeClaimObject {
  apiVersion?: string;
  kind: 'NodeClaim';
  metadata: RecordMeta;
  spec?: { tokenID?: string; csrUID?: string };
}

export interface NodeReplacementObject {
  apiVersion?: string;
  kind: 'NodeReplacement';
  metadata: RecordMeta;
  spec?: { tokenID?: string };
  status?: { claimedBy?: string };
}

export interface NodeRevocationObject {
  apiVersion?: string;
  kind: 'NodeRevocation';
  metadata: RecordMeta;
  spec?: { reason?: string };
}

export interface InventoryObject {
  apiVersion?: string;
  kind: 'Inventory';
  metadata: RecordMeta;
  /** Node name → `field: value; ...` (records/inventory.ts). */
  spec?: { nodes?: Record<string, string> };
}

/** One challenge sent and not yet answered: the AK it is for, the digest of its credential, the CSR that asked and when (its creationTimestamp). */
export interface ChallengeEntry {
  akName?: string;
  digest?: string;
  csrUID?: string;
  at?: string;
}

export interface TpmEnrolmentObject {
  apiVersion?: string;
  kind: 'TpmEnrolment';
  metadata: RecordMeta;
  /** ekHash: the inventory's tpm-ek it was made for; akName and csrUID: the AK enrolled and the CSR that proved it (once). */
  spec?: { ekHash?: string; akName?: string; csrUID?: string; challenges?: ChallengeEntry[] };
}

/** One beacon: 32 random bytes, base64, and when the approver published it (RFC 3339, its clock). */
export interface BeaconEntry {
  value?: string;
  published?: string;
}

export interface TpmBeaconObject {
  apiVersion?: string;
  kind: 'TpmBeacon';
  metadata: RecordMeta;
  /** Newest first: the current beacon and the one before it. */
  spec?: { beacons?: BeaconEntry[] };
}

export interface RecordObjects {
  tokenbindings: TokenBindingObject;
  nodeclaims: NodeClaimObject;
  nodereplacements: NodeReplacementObject;
  noderevocations: NodeRevocationObject;
  inventories: InventoryObject;
  tpmenrolments: TpmEnrolmentObject;
  tpmbeacons: TpmBeaconObject;
}
export type RecordObject = RecordObjects[RecordResource];

/** The one Inventory object the approver reads. */
export const INVENTORY_NAME = 'inventory';

const PART_OF = { 'app.kubernetes.io/part-of': 'kubeboot' };

/** A new record as the admin commands write it. */
export function newRecord<R extends RecordResource>(
  resource: R,
  name: string,
  body: Omit<RecordObjects[R], 'kind' | 'metadata' | 'apiVersion'>,
): RecordObjects[R] {
  return {
    apiVersion: API_VERSION,
    kind: KINDS[resource],
    metadata: { name, labels: { ...PART_OF } },
    ...body,
  } as unknown as RecordObjects[R];
}
