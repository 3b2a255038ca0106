// Prints prometheusrule.yaml: the groups of kubeboot.rules.yaml as a
// PrometheusRule (Prometheus Operator), so the two files cannot drift.
// test/packaging/alerts.test.ts fails when the committed file is stale:
//
//   node packaging/monitoring/prometheusrule.mjs > packaging/monitoring/prometheusrule.yaml
import { readFileSync } from 'node:fs';
import { parse, stringify } from 'yaml';

const rules = parse(readFileSync(new URL('./kubeboot.rules.yaml', import.meta.url), 'utf8'));
const manifest = {
  apiVersion: 'monitoring.coreos.com/v1',
  kind: 'PrometheusRule',
  metadata: {
    name: 'kubeboot',
    namespace: 'kube-system',
    // kube-prometheus selects rules by these labels; match your Prometheus's ruleSelector.
    labels: { 'app.kubernetes.io/part-of': 'kubeboot', prometheus: 'k8s', role: 'alert-rules' },
  },
  spec: { groups: rules.groups },
};
process.stdout.write(
  '# Generated from kubeboot.rules.yaml by prometheusrule.mjs; edit that file, then\n' +
    '#   node packaging/monitoring/prometheusrule.mjs > packaging/monitoring/prometheusrule.yaml\n' +
    stringify(manifest, { lineWidth: 0 }),
);
