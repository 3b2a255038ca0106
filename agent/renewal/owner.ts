/**
 * Who renews the kubelet's client certificate: kubeboot, or the kubelet's
 * own certificate manager (KubeletConfiguration `rotateCertificates: true`).
 * Exactly one of them may. The kubelet with rotation on loads the
 * certificate once into memory, renews it itself at 70–90 % of its lifetime
 * into its --cert-dir (`kubelet-client-<time>.pem` and the
 * `kubelet-client-current.pem` link, kubeboot's own names and, by default,
 * directory) and never looks at a file someone else wrote: a renewal by
 * kubeboot as well would be a second CSR per period that the kubelet never
 * uses (matches kubelet: cmd/kubelet/app/server.go buildKubeletClientConfig,
 * client-go util/certificate certificate_manager.go).
 *
 * A pure function of the setting and the kubelet's configuration file's text.
 */
import { InputError } from '../errors.js';
import { parseYaml } from '../config/yaml.js';
import type { KubeletRenewalMode } from '../identity.js';

export interface KubeletRenewer {
  by: 'kubeboot' | 'kubelet';
  /** One line for the log: who renews and why. */
  why: string;
  /** One line when the setting and the file disagree, or the file cannot be read as a KubeletConfiguration. */
  warning: string | null;
}

/** `rotateCertificates` from a KubeletConfiguration's text; the file's problem as one line when it is not one. */
export function readRotateCertificates(file: string, text: string): { rotate: boolean } | { problem: string } {
  let doc: unknown;
  try {
    doc = parseYaml(file, text);
  } catch (err) {
    if (err instanceof InputError) return { problem: err.message };
    throw err;
  }
  // An empty file is a configuration with every default.
  if (doc === null) return { rotate: false };
  if (typeof doc !== 'object' || Array.isArray(doc)) return { problem: `${file}: (document): expected a KubeletConfiguration mapping` };
  const fields = doc as Record<string, unknown>;
  if (fields.kind !== undefined && fields.kind !== 'KubeletConfiguration')
    return { problem: `${file}: kind: expected KubeletConfiguration, got ${String(fields.kind).slice(0, 64)}` };
  const rotate = fields.rotateCertificates;
  // matches kubelet: v1beta1 leaves rotateCertificates false unless set (kubeadm's generated file sets it true).
  if (rotate === undefined || rotate === null) return { rotate: false };
  if (typeof rotate !== 'boolean') return { problem: `${file}: rotateCertificates: expected true or false, got ${typeof rotate}` };
  return { rotate };
}

/**
 * `text` is the kubelet configuration file's content, null when it does not
 * exist, or why it could not be read. `auto` follows the file; where it cannot tell (missing, unreadable)
 * kubeboot renews, as a kubelet with that file would not rotate (or would
 * not start). The kubelet's `--rotate-certificates` flag is not visible
 * here: an operator who sets it says `kubelet` explicitly.
 */
export function kubeletRenewer(mode: KubeletRenewalMode, file: string, text: string | null | { problem: string }): KubeletRenewer {
  const read = text === null ? null : typeof text === 'string' ? readRotateCertificates(file, text) : text;
  const rotate = read !== null && 'rotate' in read ? read.rotate : null;
  const problem = read !== null && 'problem' in read ? read.problem : null;
  if (mode === 'kubelet') {
    return {
      by: 'kubelet',
      why: 'kubelet.renewal is kubelet: the kubelet renews its client certificate itself; kubeboot bootstraps it and steps in only when nothing valid is left',
      warning:
        rotate === true
          ? null
          : `kubelet.renewal is kubelet, but ${problem ?? (text === null ? `${file} does not exist` : `${file} does not set rotateCertificates: true`)}: unless the kubelet runs with --rotate-certificates, nobody renews its client certificate`,
    };
  }
  if (mode === 'kubeboot') {
    return {
      by: 'kubeboot',
      why: 'kubelet.renewal is kubeboot: kubeboot renews the kubelet client certificate',
      warning:
        rotate === true
          ? `kubelet.renewal is kubeboot, but ${file} sets rotateCertificates: true: the kubelet renews as well and uses only its own copy; set rotateCertificates: false there`
          : null,
    };
  }
  if (rotate === true)
    return {
      by: 'kubelet',
      why: `${file} sets rotateCertificates: true: the kubelet renews its client certificate itself; kubeboot bootstraps it and steps in only when nothing valid is left`,
      warning: null,
    };
  if (problem !== null)
    return {
      by: 'kubeboot',
      why: 'kubeboot renews the kubelet client certificate',
      warning: `${problem}; kubeboot renews the kubelet client certificate`,
    };
  return {
    by: 'kubeboot',
    why:
      text === null
        ? `kubeboot renews the kubelet client certificate (${file} does not exist; the kubelet's default is rotateCertificates: false)`
        : `kubeboot renews the kubelet client certificate (${file} does not set rotateCertificates: true)`,
    warning: null,
  };
}

/**
 * With a TPM (the `tpm` setting), kubeboot must renew the kubelet client
 * certificate: the kubelet's own rotateCertificates CSRs carry no TPM
 * evidence, and the approver's rule tpm-attested refuses them for a
 * TPM-enrolled name, so the certificate would run out. Null when that is not so.
 */
export function tpmRenewalProblem(tpm: string, renewer: KubeletRenewer): string | null {
  if (tpm === 'off' || renewer.by !== 'kubelet') return null;
  return `--tpm is ${tpm}, but the kubelet renews its own client certificate (${renewer.why.split(':')[0]}): its CSRs carry no TPM evidence and kubeboot approver refuses them for a TPM-enrolled name (rule tpm-attested), so the certificate runs out at its notAfter; let kubeboot renew (kubelet.renewal: kubeboot, rotateCertificates: false in the kubelet's configuration)`;
}
