import t from 'tap';
import { pcr7FlagProblem, pcr7Policies, pcr7PolicyFor, pcr7Problem } from '../../../agent/tpm/pcr-policy.js';

const A = 'a'.repeat(64);
const B = 'B'.repeat(64);
/** Quoted PCRs 0-7 with PCR 7 = `pcr7`. */
const quoted = (pcr7: string) => [...Array.from({ length: 7 }, () => Buffer.alloc(32)), Buffer.from(pcr7, 'hex')];

t.test('--tpm-pcr7 takes PREFIX=SHA256 and says what is wrong otherwise', async (t) => {
  t.equal(pcr7FlagProblem(`worker-=${A}`), null);
  t.equal(pcr7FlagProblem(`=${A}`), null, 'an empty prefix is every name');
  t.equal(pcr7FlagProblem(`worker-=${B}`), null, 'upper-case hex is read as lower-case');
  t.match(pcr7FlagProblem(A), /want PREFIX=SHA256/);
  t.match(pcr7FlagProblem(`worker-=${A.slice(2)}`), /must be 64 hex digits/);
  t.match(pcr7FlagProblem('worker-=sha256:abc'), /must be 64 hex digits/);
});

t.test('values group by prefix; the longest prefix a name starts with decides', async (t) => {
  const policies = pcr7Policies([`worker-=${A}`, `worker-=${B}`, `worker-gpu-=${A}`, `=${A}`]);
  t.same(policies, [
    { prefix: 'worker-', values: [A, B.toLowerCase()] },
    { prefix: 'worker-gpu-', values: [A] },
    { prefix: '', values: [A] },
  ]);
  t.equal(pcr7PolicyFor('worker-gpu-7', policies)?.prefix, 'worker-gpu-');
  t.equal(pcr7PolicyFor('worker-7', policies)?.prefix, 'worker-');
  t.equal(pcr7PolicyFor('db-1', policies)?.prefix, '', 'the empty prefix for everything else');
  t.equal(pcr7PolicyFor('db-1', pcr7Policies([`worker-=${A}`])), null, 'no policy: not checked');
  t.equal(pcr7PolicyFor('db-1', undefined), null);
});

t.test('PCR 7 must be one the policy allows; no policy passes', async (t) => {
  const [pool] = pcr7Policies([`worker-=${A}`, `worker-=${B}`]);
  t.equal(pcr7Problem('worker-1', quoted(A), pool!), null);
  t.equal(pcr7Problem('worker-1', quoted(B.toLowerCase()), pool!), null, 'any of its values');
  t.match(
    pcr7Problem('worker-1', quoted('c'.repeat(64)), pool!),
    `node worker-1 quoted PCR 7 ${'c'.repeat(64)}, which --tpm-pcr7 does not allow for names "worker-*" (2 value(s) allowed)`,
  );
  t.match(pcr7Problem('worker-1', quoted(A).slice(0, 7), pool!), /quoted PCR 7 \(none\)/, 'a quote without PCR 7 is refused');
  t.equal(pcr7Problem('worker-1', quoted('c'.repeat(64)), null), null);
});
