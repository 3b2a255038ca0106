/**
 * The text of a CA pin, `sha256:` + 64 hex digits (kubeadm's
 * --discovery-token-ca-cert-hash). Apart from pin.ts, which computes pins,
 * so that parsing a setting needs no crypto module at start-up.
 */
const PIN = /^sha256:[0-9a-f]{64}$/i;

/** Format and hex are case-insensitive, as kubeadm accepts them. */
export function isValidPin(text: string): boolean {
  return PIN.test(text.trim());
}

/** The pin in canonical lower case, or null when it is not one; the only definition of the format. */
export function canonicalPin(text: string): string | null {
  return isValidPin(text) ? text.trim().toLowerCase() : null;
}
