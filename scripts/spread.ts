// `npm run bench:spread`: N nodes bootstrapped in the same second must not
// renew in the same second. Their renewal deadlines come from the product's
// own code (renewal/plan.ts deadlineFor, the jitter the daemon draws), over
// several renewal cycles on a simulated clock: each renewal is issued at its
// deadline, backdated 5 min as kube-controller-manager's signer does, and its
// next deadline drawn again. Prints the busiest second and minute per cycle
// and writes the histogram as docs/renewal-spread.svg.
import { writeFileSync } from 'node:fs';
import { deadlineFor } from '../agent/renewal/plan.js';

const NODES = Number(process.env.KUBEBOOT_SPREAD_NODES ?? 10_000);
const LIFETIME_H = Number(process.env.KUBEBOOT_SPREAD_LIFETIME_HOURS ?? 24);
const CYCLES = 3;
const BACKDATE_MS = 5 * 60_000;
const lifetimeMs = LIFETIME_H * 3_600_000;
const start = Date.UTC(2026, 11, 1);

let issued = new Array<number>(NODES).fill(start);
const cycles: number[][] = [];
for (let c = 0; c < CYCLES; c++) {
  const deadlines = issued.map((at) =>
    deadlineFor(
      { notBefore: new Date(at - BACKDATE_MS), notAfter: new Date(at - BACKDATE_MS + lifetimeMs) },
      0,
      Math.random,
      new Date(at),
    ).at.getTime(),
  );
  cycles.push(deadlines);
  issued = deadlines;
}

const busiest = (times: number[], bucketMs: number): number => {
  const counts = new Map<number, number>();
  for (const t of times) counts.set(Math.floor(t / bucketMs), (counts.get(Math.floor(t / bucketMs)) ?? 0) + 1);
  return Math.max(...counts.values());
};
const rows = cycles.map((d, i) => {
  const first = Math.min(...d);
  const last = Math.max(...d);
  return `| ${i + 1} | ${((first - start) / 3_600_000).toFixed(2)} h | ${((last - start) / 3_600_000).toFixed(2)} h | ${busiest(d, 1000)} | ${busiest(d, 60_000)} |`;
});
process.stdout.write(
  `${NODES} nodes bootstrapped in one second, ${LIFETIME_H} h certificates\n\n| renewal | first | last | busiest second | busiest minute |\n|---|---|---|---|---|\n${rows.join('\n')}\n`,
);

// The histogram: renewals per 10 minutes, one colour per cycle.
const BUCKET_MS = 10 * 60_000;
const end = Math.max(...cycles.flat());
const buckets = Math.ceil((end - start) / BUCKET_MS) + 1;
const counts = cycles.map((d) => {
  const h = new Array<number>(buckets).fill(0);
  for (const t of d) h[Math.floor((t - start) / BUCKET_MS)]!++;
  return h;
});
const top = Math.max(...counts.flat());
const W = 900;
const H = 360;
const pad = { l: 60, r: 20, t: 40, b: 50 };
const x = (i: number) => pad.l + (i / buckets) * (W - pad.l - pad.r);
const y = (n: number) => H - pad.b - (n / top) * (H - pad.t - pad.b);
const colours = ['#1f77b4', '#ff7f0e', '#2ca02c'];
const bars = counts
  .flatMap((h, c) =>
    h.map((n, i) =>
      n === 0
        ? ''
        : `<rect x="${x(i).toFixed(1)}" y="${y(n).toFixed(1)}" width="${(x(1) - x(0)).toFixed(1)}" height="${(H - pad.b - y(n)).toFixed(1)}" fill="${colours[c]}"/>`,
    ),
  )
  .join('');
const hours = Math.ceil((end - start) / 3_600_000);
const ticks = Array.from({ length: Math.floor(hours / 12) + 1 }, (_, k) => k * 12)
  .map(
    (hr) =>
      `<text x="${x((hr * 3_600_000) / BUCKET_MS).toFixed(1)}" y="${H - pad.b + 18}" font-size="12" text-anchor="middle">${hr} h</text>`,
  )
  .join('');
const legend = cycles
  .map(
    (_, c) =>
      `<rect x="${W - 190}" y="${pad.t + c * 18}" width="12" height="12" fill="${colours[c]}"/><text x="${W - 172}" y="${pad.t + c * 18 + 11}" font-size="12">renewal ${c + 1}</text>`,
  )
  .join('');
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif">
<rect width="${W}" height="${H}" fill="white"/>
<text x="${W / 2}" y="22" font-size="15" text-anchor="middle">Renewals per 10 minutes: ${NODES} nodes bootstrapped in the same second, ${LIFETIME_H} h certificates</text>
<line x1="${pad.l}" y1="${H - pad.b}" x2="${W - pad.r}" y2="${H - pad.b}" stroke="black"/>
<line x1="${pad.l}" y1="${pad.t}" x2="${pad.l}" y2="${H - pad.b}" stroke="black"/>
<text x="${pad.l - 8}" y="${y(top) + 4}" font-size="12" text-anchor="end">${top}</text>
<text x="${pad.l - 8}" y="${H - pad.b + 4}" font-size="12" text-anchor="end">0</text>
<text x="${W / 2}" y="${H - 12}" font-size="12" text-anchor="middle">time since the nodes bootstrapped (the kubeboot deadline: 70-90 % of each certificate's lifetime)</text>
${bars}${ticks}${legend}
</svg>
`;
writeFileSync('docs/renewal-spread.svg', svg);
process.stdout.write('\nwrote docs/renewal-spread.svg\n');
