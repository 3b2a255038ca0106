// The shipped Prometheus alerting rules (packaging/monitoring/): promtool
// accepts them, and `promtool test rules` proves each alert fires on series
// shaped like kubeboot's /metrics and stays silent where it should
// (test/packaging/alerts/kubeboot.rules.test.yaml). The PrometheusRule is the
// same groups. (test/e2e/approver-image.test.ts scrapes a running daemon and
// approver for every metric name the rules use.)
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { parse, stringify } from 'yaml';
import { rulesFile, type Rule } from './fixtures/alerts.js';
import { output, repoRoot, run, toolsOrSkip } from './fixtures/packages.js';

const testFile = join(repoRoot, 'test/packaging/alerts/kubeboot.rules.test.yaml');

interface AlertTest {
  alertname: string;
  exp_alerts?: unknown[];
}

if (toolsOrSkip(t, ['apt-get', 'dpkg-deb'], false)) {
  const promtool = execFileSync('bash', ['scripts/promtool.sh'], { cwd: repoRoot, encoding: 'utf8' }).trim();
  const rules = parse(readFileSync(rulesFile, 'utf8')) as { groups: { name: string; rules: Rule[] }[] };
  const alerts = rules.groups.flatMap((g) => g.rules.map((r) => r.alert));

  t.test('promtool accepts the rules', async (t) => {
    const check = run(promtool, ['check', 'rules', rulesFile]);
    t.equal(check.status, 0, `promtool check rules\n${check.stdout}${check.stderr}`);
    t.match(check.stdout, `SUCCESS: ${alerts.length} rules found`);
    t.same(
      alerts.sort(),
      [
        'KubebootApproverCsrCacheFull',
        'KubebootApproverDown',
        'KubebootApproverNoLeader',
        'KubebootApproverRequesterOverShare',
        'KubebootApproverSlowApprovals',
        'KubebootApproverViolations',
        'KubebootCaBundleRefused',
        'KubebootCertificateExpiringWithoutRenewal',
        'KubebootCsrPendingTooLong',
        'KubebootDaemonDown',
        'KubebootNoValidCertificate',
        'KubebootRenewalFailing',
      ],
      'the node-side and approver alerts',
    );
  });

  t.test('promtool test rules: every alert fires on its series and stays silent on the others', async (t) => {
    const began = Date.now();
    const result = run(promtool, ['test', 'rules', testFile]);
    t.equal(result.status, 0, `promtool test rules (${Date.now() - began} ms)\n${result.stdout}${result.stderr}`);
    const cases = (parse(readFileSync(testFile, 'utf8')).tests as { alert_rule_test: AlertTest[] }[]).flatMap((g) => g.alert_rule_test);
    for (const alert of alerts) {
      t.ok(
        cases.some((c) => c.alertname === alert && (c.exp_alerts?.length ?? 0) > 0),
        `${alert}: a case where it fires`,
      );
      t.ok(
        cases.some((c) => c.alertname === alert && (c.exp_alerts?.length ?? 0) === 0),
        `${alert}: a case where it does not`,
      );
    }
  });

  t.test('a broken rule fails its promtool test (the tests can fail)', async (t) => {
    const dir = t.testdir();
    // The pending-CSR threshold loosened from 10 to 20 minutes: the case at minute 12 must fail.
    writeFileSync(join(dir, 'kubeboot.rules.yaml'), readFileSync(rulesFile, 'utf8').replace('> 10 * 60', '> 20 * 60'));
    const copy = parse(readFileSync(testFile, 'utf8'));
    copy.rule_files = ['kubeboot.rules.yaml'];
    writeFileSync(join(dir, 'test.yaml'), stringify(copy));
    const result = run(promtool, ['test', 'rules', join(dir, 'test.yaml')]);
    t.not(result.status, 0, 'promtool test rules fails');
    t.match(result.stdout + result.stderr, /alertname: KubebootCsrPendingTooLong, time: 12m/, 'on the pending-CSR case');
  });

  t.test('the PrometheusRule is the rules file, regenerated', async (t) => {
    const committed = readFileSync(join(repoRoot, 'packaging/monitoring/prometheusrule.yaml'), 'utf8');
    t.equal(
      committed,
      output(process.execPath, ['packaging/monitoring/prometheusrule.mjs']),
      'up to date with kubeboot.rules.yaml (run packaging/monitoring/prometheusrule.mjs)',
    );
    const manifest = parse(committed);
    t.equal(manifest.kind, 'PrometheusRule');
    t.same(manifest.spec.groups, rules.groups, 'the same groups');
    const extracted = join(t.testdir(), 'groups.yaml');
    writeFileSync(extracted, stringify({ groups: manifest.spec.groups }));
    t.equal(run(promtool, ['check', 'rules', extracted]).status, 0, 'promtool accepts its groups');
  });
}
