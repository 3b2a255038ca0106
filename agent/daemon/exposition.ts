/**
 * The few Prometheus series `kubeboot run` keeps, in the text exposition
 * format (version 0.0.4). Written here rather than with prom-client, which
 * the daemon used before: prom-client alone holds 9.4 MiB in a process
 * (docs/benchmarks.md), and the resting daemon's whole budget over bare
 * Node is 21 MiB. The approver, which has no such budget, keeps prom-client.
 */

export const EXPOSITION_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export type Labels = Record<string, string>;
type Kind = 'counter' | 'gauge' | 'histogram';

interface Family {
  name: string;
  help: string;
  kind: Kind;
  /** Series key (labels rendered) → value; for a histogram, its bucket counts then sum and count. */
  series: Map<string, { labels: Labels; value: number; buckets?: number[]; sum?: number }>;
  buckets?: number[];
  /** Series computed at render time (gauges read from state, not kept). */
  collect?: () => Array<{ labels: Labels; value: number }>;
}

/** `a="x",b="y"` with the format's three escapes. */
function renderLabels(labels: Labels): string {
  return Object.entries(labels)
    .map(([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"')}"`)
    .join(',');
}

function sample(name: string, labels: Labels, value: number): string {
  const rendered = renderLabels(labels);
  const number = Number.isNaN(value) ? 'NaN' : value === Infinity ? '+Inf' : value === -Infinity ? '-Inf' : String(value);
  return `${name}${rendered ? `{${rendered}}` : ''} ${number}\n`;
}

export class Exposition {
  readonly #families = new Map<string, Family>();

  #family(name: string, help: string, kind: Kind, extra: Partial<Family> = {}): Family {
    const family: Family = { name, help, kind, series: new Map(), ...extra };
    this.#families.set(name, family);
    return family;
  }

  counter(name: string, help: string): { inc(labels?: Labels, by?: number): void } {
    const f = this.#family(name, help, 'counter');
    return {
      inc(labels = {}, by = 1) {
        const key = renderLabels(labels);
        const s = f.series.get(key) ?? { labels, value: 0 };
        s.value += by;
        f.series.set(key, s);
      },
    };
  }

  gauge(name: string, help: string): { set(labels: Labels, value: number): void; remove(labels: Labels): void; reset(): void } {
    const f = this.#family(name, help, 'gauge');
    return {
      set: (labels, value) => void f.series.set(renderLabels(labels), { labels, value }),
      remove: (labels) => void f.series.delete(renderLabels(labels)),
      reset: () => f.series.clear(),
    };
  }

  /** A series read from `collect` at every render rather than kept. */
  computed(name: string, help: string, kind: 'counter' | 'gauge', collect: () => Array<{ labels: Labels; value: number }>): void {
    this.#family(name, help, kind, { collect });
  }

  histogram(name: string, help: string, buckets: number[]): { observe(labels: Labels, value: number): void } {
    const f = this.#family(name, help, 'histogram', { buckets });
    return {
      observe(labels, value) {
        const key = renderLabels(labels);
        const s = f.series.get(key) ?? { labels, value: 0, buckets: buckets.map(() => 0), sum: 0 };
        buckets.forEach((le, i) => {
          if (value <= le) s.buckets![i]! += 1;
        });
        s.sum! += value;
        s.value += 1;
        f.series.set(key, s);
      },
    };
  }

  render(): string {
    let out = '';
    for (const f of this.#families.values()) {
      out += `# HELP ${f.name} ${f.help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}\n# TYPE ${f.name} ${f.kind}\n`;
      const series = f.collect ? f.collect() : [...f.series.values()];
      for (const s of series) {
        if (f.kind !== 'histogram') {
          out += sample(f.name, s.labels, s.value);
          continue;
        }
        const kept = s as { labels: Labels; value: number; buckets: number[]; sum: number };
        f.buckets!.forEach((le, i) => {
          out += sample(`${f.name}_bucket`, { le: String(le), ...kept.labels }, kept.buckets[i]!);
        });
        out += sample(`${f.name}_bucket`, { le: '+Inf', ...kept.labels }, kept.value);
        out += sample(`${f.name}_sum`, kept.labels, kept.sum);
        out += sample(`${f.name}_count`, kept.labels, kept.value);
      }
    }
    return out;
  }
}

/**
 * process_* series as Prometheus client libraries name them, from what Node
 * reports about itself (no /proc parsing: the daemon stays small).
 */
export function addProcessMetrics(exposition: Exposition, startedAt: Date): void {
  exposition.computed('process_start_time_seconds', 'Start time of the process since unix epoch in seconds.', 'gauge', () => [
    { labels: {}, value: Math.round(startedAt.getTime() / 1000) },
  ]);
  exposition.computed('process_resident_memory_bytes', 'Resident memory size in bytes.', 'gauge', () => [
    { labels: {}, value: process.memoryUsage.rss() },
  ]);
  exposition.computed('process_cpu_seconds_total', 'Total user and system CPU time spent in seconds.', 'counter', () => {
    const { user, system } = process.cpuUsage();
    return [{ labels: {}, value: (user + system) / 1e6 }];
  });
}
