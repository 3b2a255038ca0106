/**
 * Checks across settings; single values are checked as they are parsed.
 * The error names where the offending value was set, so the operator edits
 * the right place.
 */
import { InputError } from '../errors.js';
import type { Origin } from './coerce.js';
import type { ConfigKey } from './options.js';
import type { Config } from './types.js';

/** Where a key got its value; null when it kept the default. */
export type OriginOf = (key: ConfigKey) => Origin | null;

export function validateConfig(config: Config, originOf: OriginOf): void {
  const files: [ConfigKey, string][] = [
    ['bootstrapKubeconfig', config.bootstrapKubeconfig],
    ['kubelet.kubeconfig', config.kubelet.kubeconfig],
  ];
  if (config.kubeProxy.enabled) files.push(['kubeProxy.kubeconfig', config.kubeProxy.kubeconfig]);
  // Writing one kubeconfig over another would lose a credential; kubeadm#2054 is
  // what happens when the bootstrap kubeconfig disappears.
  for (const [i, [keyA, a]] of files.entries()) {
    for (const [keyB, b] of files.slice(i + 1)) {
      if (a === b) conflict(originOf, keyB, keyA, `must differ from ${keyA} (both are ${a})`);
    }
  }
  // matches client-go's leaderelection checks: the leader gives up before others may take over.
  const { leaseDuration, renewDeadline, retryPeriod } = config.approver;
  if (renewDeadline >= leaseDuration)
    conflict(
      originOf,
      'approver.renewDeadline',
      'approver.leaseDuration',
      `must be less than approver.leaseDuration (${renewDeadline} >= ${leaseDuration})`,
    );
  if (retryPeriod >= renewDeadline)
    conflict(
      originOf,
      'approver.retryPeriod',
      'approver.renewDeadline',
      `must be less than approver.renewDeadline (${retryPeriod} >= ${renewDeadline})`,
    );
}

function conflict(originOf: OriginOf, key: ConfigKey, other: ConfigKey, problem: string): never {
  const origin = originOf(key) ?? originOf(other);
  throw new InputError(origin?.source ?? 'defaults', origin?.field ?? key, problem);
}
