// Regenerates the README's generated sections: the configuration reference
// from agent/config/options.ts and the approver's rule tables from
// agent/approver/policy.ts (test/unit/docs.test.ts fails until this has been
// run after an option or a rule changed).
import { readFile, writeFile } from 'node:fs/promises';
import { renderRuleTables } from '../agent/approver/policy.js';
import { renderOptionsReference } from '../agent/config/options.js';

const file = new URL('../README.md', import.meta.url);

/** Replaces what stands between `<!-- NAME:begin ... -->\n` and `<!-- NAME:end -->`. */
function fill(text: string, name: string, content: string): string {
  const [before, rest] = text.split(new RegExp(`(?<=<!-- ${name}:begin[^\\n]*\\n)`));
  const after = rest?.slice(rest.indexOf(`<!-- ${name}:end -->`));
  if (!before || !after) throw new Error(`README.md has no ${name}:begin/${name}:end markers`);
  return before + content + after;
}

const readme = await readFile(file, 'utf8');
await writeFile(file, fill(fill(readme, 'options', renderOptionsReference()), 'rules', renderRuleTables()));
