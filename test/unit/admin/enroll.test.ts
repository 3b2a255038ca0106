// `kubeboot node enroll` writes a TPM into a name's inventory entry and
// nothing else: the admin's other fields stay, a file of `tpm identify`
// lines enrolls many, and one TPM is never enrolled under two names.
import t from 'tap';
import { enrolledNodes, enrolmentOf, parseEnrolmentFile } from '../../../agent/admin/enroll.js';
import { parseInventoryEntry } from '../../../agent/records/inventory.js';

const EK = 'ab'.repeat(32);
const EK2 = 'cd'.repeat(32);
const AK = `000b${'12'.repeat(32)}`;

t.test('a file of tpm identify lines, each prefixed with the node name', async (t) => {
  const text = [
    '# from the hypervisor',
    `worker-1 ek-sha256: ${EK}`,
    `worker-1 ak-name: ${AK}`,
    'worker-1 ek-certificate: subject CN=unknown; issuer CN=swtpm-localca; serial 02; valid to …',
    'worker-1 tpm: /dev/tpmrm0; EK persistent handle 0x81010001',
    '',
    `worker-2 ek-sha256: ${EK2}`,
  ].join('\n');
  t.same(parseEnrolmentFile(text, 'tpms.txt'), [
    { name: 'worker-1', ek: EK, ak: AK },
    { name: 'worker-2', ek: EK2 },
  ]);
  const bad: [string, RegExp][] = [
    [`worker-1 ek-sha256: ${EK.toUpperCase()}`, /tpms\.txt: line 1: expected the EK hash/],
    [`worker-1 ak-name: ${AK.slice(4)}`, /line 1: expected the AK name/],
    [`Worker_1 ek-sha256: ${EK}`, /line 1: node name "Worker_1"/],
    [`worker-1 machine-id: ${EK}`, /line 1: unknown field "machine-id"/],
    [`worker-1 ek-sha256: ${EK}\nworker-1 ek-sha256: ${EK2}`, /line 2: node worker-1 is given two different ek-sha256 values/],
    ['# nothing', /holds no ek-sha256 or ak-name line/],
  ];
  for (const [file, want] of bad) t.throws(() => parseEnrolmentFile(file, 'tpms.txt'), { message: want });
});

t.test('the command line: a name and --tpm-ek and/or --tpm-ak', async (t) => {
  t.same(enrolmentOf('worker-1', EK, undefined), { name: 'worker-1', ek: EK });
  t.throws(() => enrolmentOf('worker-1', undefined, undefined), { message: /give --tpm-ek HASH, --tpm-ak NAME, or both/ });
  t.throws(() => enrolmentOf('worker-1', undefined, 'nope'), { message: /--tpm-ak.*expected the AK name/ });
});

t.test("an enrolment keeps the entry's other fields and replaces only what it gives", async (t) => {
  const nodes = { 'worker-1': 'ips: 10.0.0.7; tpm-ek: ' + EK2, 'worker-2': 'ips: 10.0.0.8' };
  const out = enrolledNodes(nodes, [
    { name: 'worker-1', ek: EK, ak: AK },
    { name: 'worker-3', ak: `000b${'34'.repeat(32)}` },
  ]);
  t.same(Object.keys(out), ['worker-1', 'worker-3'], 'only the enrolled keys are written (a merge patch)');
  t.same(parseInventoryEntry('worker-1', out['worker-1']!), {
    name: 'worker-1',
    ips: ['10.0.0.7'],
    cidrs: [],
    machineId: null,
    tpmEk: EK,
    tpmAk: AK,
  });
  t.equal(out['worker-3'], `tpm-ak: 000b${'34'.repeat(32)}`, 'a new name gets an entry of its own');
  t.throws(() => enrolledNodes(nodes, [{ name: 'worker-2', ek: EK2 }]), { message: /would be enrolled for both worker-1 and worker-2/ });
  t.throws(() => enrolledNodes({ 'worker-1': 'ips: nope' }, [{ name: 'worker-1', ek: EK }]), { message: /field ips: .*fix the entry/ });
});
