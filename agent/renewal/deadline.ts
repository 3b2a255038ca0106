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
 * matches client-go certificate_manager nextRotationDeadline/jitteryDuration:
 * notBefore + lifetime·(0.7 + 0.2·random), i.e. somewhere in 70–90 % of the
 * lifetime, so nodes joined together do not renew together. The margin rule
 * (kubeboot's own) can only bring the deadline earlier, never before notBefore.
 */
export function renewalDeadline(cert: Validity, settings: DeadlineSettings, random: () => number): Date {
  const start = cert.notBefore.getTime();
  const lifetime = Math.max(0, cert.notAfter.getTime() - start);
  const r = Math.min(Math.max(random(), 0), 1);
  let deadline = start + lifetime * (0.7 + 0.2 * r);
  if (settings.margin > 0) {
    deadline = Math.min(deadline, cert.notAfter.getTime() - settings.margin * 1000);
  }
  return new Date(Math.max(start, Math.floor(deadline)));
}

export function isDue(deadline: Date, now: Date): boolean {
  return now.getTime() >= deadline.getTime();
}
