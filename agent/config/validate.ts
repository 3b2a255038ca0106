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
}

function conflict(originOf: OriginOf, key: ConfigKey, other: ConfigKey, problem: string): never {
  const origin = originOf(key) ?? originOf(other);
  throw new InputError(origin?.source ?? 'defaults', origin?.field ?? key, problem);
}
