import t from 'tap';
import { warnFlags, type StartupFlags } from '../../../agent/approver/startup.js';
import { capturingLogger } from '../../support/fake-time.js';

const SAFE: StartupFlags = {
  kubeletServing: false,
  servingIpCidrs: [],
  kubeletClient: true,
  unsafeApproveUnboundTokens: false,
  inventory: true,
  tpmPcr7: [],
};
const warned = (flags: Partial<StartupFlags>) => {
  const { logger, lines } = capturingLogger();
  warnFlags({ ...SAFE, ...flags }, logger);
  return lines.filter((l) => l.level === 'warn').map((l) => l.message);
};

t.test('flags that weaken a check or do nothing as given get one warning line each; safe ones none', async (t) => {
  t.same(warned({}), [], 'the shipped flags: silent');
  t.same(warned({ tpmPcr7: [`worker-=${'a'.repeat(64)}`] }), [], '--tpm-pcr7 with --inventory: silent');
  t.match(warned({ tpmPcr7: [`worker-=${'a'.repeat(64)}`], inventory: false }), [/^--tpm-pcr7 has no effect without --inventory/]);
  t.match(warned({ tpmPcr7: [`=${'a'.repeat(64)}`], kubeletClient: false }), [/^--inventory has no effect/, /^--tpm-pcr7 has no effect/]);
  t.match(warned({ kubeletServing: true }), [/serving approval is on without --serving-ip-cidr/]);
  t.match(warned({ unsafeApproveUnboundTokens: true }), [/^--unsafe-approve-unbound-tokens: a bootstrap token with no/]);
  t.match(warned({ kubeletClient: false }), [/^--inventory has no effect with --no-approve-kubelet-client/]);
});
