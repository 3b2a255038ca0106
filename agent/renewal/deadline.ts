/**
 * When to renew a certificate: a pure function of its validity window, the
 * operator's margin and a random number, so tests can pin every case.
 */

export interface Validity {
  notBefore: Date;
  notAfter: Date;
}

export interface DeadlineSettings {
  /** Renew at the latest this many seconds before notAfter; 0 turns the rule off. */
  margin: number;
}

/**
 * How long before notAfter a renewed certificate must be on disk so that
 * its consumers have switched to it before the old one expires. The kubelet
 * and kube-proxy read kubeboot's files through client-go, which re-reads a
 * file certificate on each new TLS handshake but, on a connection that stays
 * up, only notices a change on its check every 5 minutes
 * (transport/cert_rotation.go CertCallbackRefreshDuration); then it closes
 * its connections and reconnects with the new file. 5 minutes for that
 * check, plus 1 minute for the CSR to be approved and signed.
 */
export const CONSUMER_RELOAD_MS = 5 * 60_000;
export const CONSUMER_SLACK_MS = 60_000;
export const CONSUMER_LEAD_MS = CONSUMER_RELOAD_MS + CONSUMER_SLACK_MS;

/**
 * matches client-go certificate_manager nextRotationDeadline/jitteryDuration:
 * notBefore + lifetime·(0.7 + 0.2·random), i.e. somewhere in 70–90 % of the
 * lifetime, so nodes joined together do not renew together.
 *
 * Then kubeboot's own rules, which only bring the deadline earlier:
 * - the consumer lead: due no later than notAfter − CONSUMER_LEAD_MS, so the
 *   kubelet and kube-proxy pick up the new file before the old one expires.
 *   It bites only on short certificates (on kube-controller-manager's
 *   shortest, 10 minutes signed with notBefore backdated 5, the jitter alone
 *   would leave 1.5–4.5 minutes). Held to no earlier than half the lifetime,
 *   so a certificate shorter than twice the lead is renewed every half
 *   lifetime instead of at once and again and again;
 * - the operator's margin: due no later than notAfter − margin, never
 *   before notBefore.
 */
export function renewalDeadline(cert: Validity, settings: DeadlineSettings, random: () => number): Date {
  const start = cert.notBefore.getTime();
  const lifetime = Math.max(0, cert.notAfter.getTime() - start);
  const r = Math.min(Math.max(random(), 0), 1);
  let deadline = start + lifetime * (0.7 + 0.2 * r);
  deadline = Math.min(deadline, Math.max(cert.notAfter.getTime() - CONSUMER_LEAD_MS, start + lifetime / 2));
  if (settings.margin > 0) {
    deadline = Math.min(deadline, cert.notAfter.getTime() - settings.margin * 1000);
  }
  return new Date(Math.max(start, Math.floor(deadline)));
}

export function isDue(deadline: Date, now: Date): boolean {
  return now.getTime() >= deadline.getTime();
}
