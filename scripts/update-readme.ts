// Regenerates the docs' generated sections: the configuration reference in
// docs/reference.md from agent/config/options.ts, and the approver's rule
// tables in docs/approver.md from agent/approver/policy.ts
// (test/unit/docs.test.ts fails until this has been run after an option or a
// rule changed).
import { readFile, writeFile } from 'node:fs/promises';
import { renderRuleTables } from '../agent/approver/policy.js';
import { renderOptionsReference } from '../agent/config/options.js';

/** Replaces what stands between `<!-- NAME:begin ... -->\n` and `<!-- NAME:end -->` in one file. */
async function fill(file: string, name: string, content: string): Promise<void> {
  const url = new URL(`../${file}`, import.meta.url);
  const text = await readFile(url, 'utf8');
  const [before, rest] = text.split(new RegExp(`(?<=<!-- ${name}:begin[^\\n]*\\n)`));
  const after = rest?.slice(rest.indexOf(`<!-- ${name}:end -->`));
  if (!before || !after) throw new Error(`${file} has no ${name}:begin/${name}:end markers`);
  await writeFile(url, before + content + after);
}

await fill('docs/reference.md', 'options', renderOptionsReference());
await fill('docs/approver.md', 'rules', renderRuleTables());
