/**
 * The rule tpm-attested (kubelet client, with --inventory): a name whose
 * inventory entry carries a TPM identity (`tpm-ak`, `tpm-ek`:
 * records/inventory.ts) is issued, first issue and renewal alike, only on a
 * CSR whose spec.request carries a KUBEBOOT TPM EVIDENCE block: a quote by
 * the enrolled AK over this CSR's subject, key and creation window
 * (tpm/csr-evidence.ts). Stateless: everything is recomputed from the CSR
 * and the entry. Pure.
 */
import { INVENTORY_REF, tpmBinding, type InventoryEntry } from '../../records/inventory.js';
import { EVIDENCE_PEM_TYPE, verifyCsrEvidence, WINDOW_SECONDS } from '../../tpm/csr-evidence.js';
import { EvidenceError } from '../../tpm/verify.js';
import type { Rule } from './rule.js';
import type { RequestFacts } from '../request.js';

export const TPM_ATTESTED_RULE = 'tpm-attested';

/** Why this CSR of a TPM-bound name is refused, or null (approved by this rule; a name with no TPM identity always is). */
export function tpmAttestedProblem(
  entry: InventoryEntry,
  request: Pick<RequestFacts, 'binding' | 'tpmEvidence'>,
  created: string | undefined,
): string | null {
  const name = entry.name;
  const binding = tpmBinding(entry);
  if (binding === 'none') return null;
  if (binding === 'ek-only' || entry.tpmAk === undefined)
    return `node ${name} is enrolled by its TPM's EK alone (${INVENTORY_REF} key ${name}: tpm-ek) and enrolment of its AK from the EK is not built yet: enroll the AK too (kubeboot tpm identify on the machine prints ak-name; kubeboot node enroll ${name} --tpm-ek … --tpm-ak …)`;
  if (request.tpmEvidence == null || request.binding == null)
    return `node ${name} is TPM-bound (${INVENTORY_REF} key ${name}: tpm-ak) and this CSR carries no ${EVIDENCE_PEM_TYPE}: only kubeboot with --tpm on that machine files such CSRs (the kubelet's own rotateCertificates CSRs carry none; let kubeboot renew)`;
  const at = Date.parse(created ?? '');
  if (Number.isNaN(at)) return 'the CSR has no creationTimestamp to judge its evidence window by';
  try {
    verifyCsrEvidence(request.tpmEvidence, {
      binding: request.binding,
      akName: Buffer.from(entry.tpmAk, 'hex'),
      created: new Date(at),
    });
    return null;
  } catch (err) {
    if (err instanceof EvidenceError)
      return `the TPM evidence is refused (${err.message}); node ${name}'s enrolled AK is ${entry.tpmAk.slice(0, 12)}… (${INVENTORY_REF})`;
    throw err;
  }
}

/** Its row in KUBELET_CLIENT_RULES (policy.ts). */
export const tpmAttested: Rule = {
  name: TPM_ATTESTED_RULE,
  reads: ['inventory'],
  inventory: 'on',
  summary: `when the node's entry in \`${INVENTORY_REF}\` carries \`tpm-ak\` (\`kubeboot node enroll\`), \`spec.request\` carries a \`${EVIDENCE_PEM_TYPE}\` block after the request: a quote by that AK (restricted, fixedTPM, ECDSA P-256 signing key), its signature valid, over SHA-256 of this CSR's subject, public key and a ${WINDOW_SECONDS / 60}-minute window within one of the CSR's creationTimestamp, covering SHA-256 PCRs 0-7 (docs/tpm.md); a name with only \`tpm-ek\` is refused until its AK is enrolled. Names without either are not checked (and an unlisted name is refused by \`inventory-listed\`)`,
  check: ({ csr, world }) => {
    const lookup = world.inventory;
    // No entry to trust: inventory-listed, which runs in the same mode, refuses the CSR and says why.
    if (lookup == null || !lookup.found || lookup.entry === null || 'problem' in lookup.entry) return null;
    return csr.request === null ? null : tpmAttestedProblem(lookup.entry, csr.request, csr.created);
  },
};
