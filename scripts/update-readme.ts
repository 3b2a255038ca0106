// Regenerates the README's configuration reference from agent/config/options.ts
// (test/unit/docs.test.ts fails until this has been run after an option changed).
import { readFile, writeFile } from 'node:fs/promises';
import { renderOptionsReference } from '../agent/config/options.js';

const file = new URL('../README.md', import.meta.url);
const readme = await readFile(file, 'utf8');
const [before, rest] = readme.split(/(?<=<!-- options:begin[^\n]*\n)/);
const after = rest?.slice(rest.indexOf('<!-- options:end -->'));
if (!before || !after) throw new Error('README.md has no options:begin/options:end markers');
await writeFile(file, before + renderOptionsReference() + after);
