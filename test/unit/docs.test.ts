// README, `kubeboot --help` and the options table must say the same thing.
import { readFile } from 'node:fs/promises';
import t from 'tap';
import { COMMANDS, OPTIONS, renderOptionsReference } from '../../agent/config/options.js';
import { helpText } from '../../agent/cli/help.js';

const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');

t.test('the README configuration reference is the generated options table', async (t) => {
  const section = readme.split('<!-- options:begin')[1]?.split('<!-- options:end -->')[0] ?? '';
  t.equal(section.slice(section.indexOf('\n') + 1), renderOptionsReference(), 'regenerate it from agent/config/options.ts');
});

t.test('--help lists every flag and every exit code the README documents', async (t) => {
  const help = helpText();
  for (const spec of OPTIONS.filter((o) => o.flag !== null)) t.match(help, `--${spec.type === 'bool' ? '[no-]' : ''}${spec.flag}`, `--help shows --${spec.flag}`);
  for (const code of ['0', '1', '2', '3', '4']) {
    t.match(readme, new RegExp(`\\n\\| ${code} \\|`), `README documents exit code ${code}`);
    t.match(help, new RegExp(`\\n  ${code}  `), `--help documents exit code ${code}`);
  }
  for (const command of COMMANDS) {
    t.match(help, new RegExp(`\\n  ${command} `), `--help lists ${command}`);
    t.match(readme, `kubeboot ${command}`, `README lists ${command}`);
  }
});
