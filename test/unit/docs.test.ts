// README, docs/, `kubeboot --help` and the options table must say the same thing.
import { readFile } from 'node:fs/promises';
import t from 'tap';
import { POLICIES, renderRuleTables } from '../../agent/approver/policy.js';
import { COMMAND_FLAGS, COMMANDS, OPTIONS, renderOptionsReference } from '../../agent/config/options.js';
import { COMMAND_HELP, commandHelpText, helpText } from '../../agent/cli/help.js';
import { ExitCode } from '../../agent/errors.js';

const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
const reference = await readFile(new URL('../../docs/reference.md', import.meta.url), 'utf8');
const approverDoc = await readFile(new URL('../../docs/approver.md', import.meta.url), 'utf8');

t.test("docs/approver.md's rule tables are generated from the rules themselves", async (t) => {
  const section = approverDoc.split('<!-- rules:begin')[1]?.split('<!-- rules:end -->')[0] ?? '';
  t.equal(section.slice(section.indexOf('\n') + 1), renderRuleTables(), 'regenerate them from agent/approver/policy.ts (npm run docs)');
  for (const spec of Object.values(POLICIES))
    for (const rule of spec.rules) t.match(section, `| \`${rule.name}\` |`, `${spec.name}: ${rule.name} is in the table`);
});

t.test('the configuration reference in docs/reference.md is the generated options table', async (t) => {
  const section = reference.split('<!-- options:begin')[1]?.split('<!-- options:end -->')[0] ?? '';
  t.equal(section.slice(section.indexOf('\n') + 1), renderOptionsReference(), 'regenerate it from agent/config/options.ts');
});

t.test('--help lists every flag and every exit code the docs document; the README names every command', async (t) => {
  const help = helpText();
  for (const spec of OPTIONS.filter((o) => o.flag !== null))
    t.match(help, `--${spec.type === 'bool' ? '[no-]' : ''}${spec.flag}`, `--help shows --${spec.flag}`);
  for (const code of Object.values(ExitCode).map(String)) {
    t.match(reference, new RegExp(`\\n\\| ${code} \\|`), `docs/reference.md documents exit code ${code}`);
    t.match(readme, new RegExp(`\\b${code}\\s+\\(`), `the README names exit code ${code}`);
    t.match(help, new RegExp(`\\n  ${code}  `), `--help documents exit code ${code}`);
  }
  for (const command of COMMANDS) {
    t.match(help, new RegExp(`\\n  ${command} `), `--help lists ${command}`);
    t.match(readme, `| \`kubeboot ${command}\` |`, `the README's table lists ${command}`);
    t.match(reference, `kubeboot ${command}`, `docs/reference.md describes ${command}`);
  }
});

t.test('the unit, the package scripts and packaging/README.md name the same paths that make kubeboot start', async (t) => {
  const read = (p: string) => readFile(new URL(`../../${p}`, import.meta.url), 'utf8');
  const unit = [...(await read('systemd/kubeboot.service')).matchAll(/^ConditionPathExists=\|(\S+)$/gm)].map((m) => m[1]!).sort();
  const script = /kubeboot_has_credentials\(\) \{[^}]*\}/s.exec(await read('packaging/maintscript.sh'))?.[0] ?? '';
  const scripted = [...script.matchAll(/\[ -e (\S+) \]/g)].map((m) => m[1]!).sort();
  t.ok(unit.length >= 3, `the unit has its conditions: ${unit.join(', ')}`);
  t.same(scripted, unit, "postinst starts the unit on exactly the unit's conditions");
  const doc = (await read('packaging/README.md')).replace(/\s+/g, ' ');
  const install = /- install: (.*?)- upgrade:/.exec(doc)?.[1] ?? '';
  t.same([...install.matchAll(/`(\/etc\/kubernetes\/[^`]+)`/g)].map((m) => m[1]!).sort(), unit, 'packaging/README.md lists the same paths');
  const count = ['', 'one', 'two', 'three', 'four', 'five'][unit.length];
  t.match(install, `the same ${count} paths`, 'and counts them right');
});

/** The flags a help text lists, one per option entry (`--[no-]x` counts as `--x`). */
function listedFlags(help: string): string[] {
  return [...help.matchAll(/^ {2}--(?:\[no-\])?(?:no-)?([a-z0-9-]+)/gm)]
    .map((m) => m[1]!)
    .filter((f) => f !== 'help')
    .sort();
}

t.test("each command's --help lists exactly the options it takes, from the options table", async (t) => {
  const read = new Set<string>();
  for (const command of COMMANDS) {
    const help = commandHelpText(command);
    t.match(help, new RegExp(`^Usage: kubeboot ${command}[ \\n]`), `${command}: its own usage line`);
    const own = COMMAND_FLAGS.filter((c) => c.commands.includes(command)).map((c) => c.flag);
    const options = [...COMMAND_HELP[command].options];
    for (const flag of options)
      t.ok(
        OPTIONS.some((o) => o.flag === flag),
        `${command}: --${flag} is in the options table`,
      );
    t.same(listedFlags(help), [...own, ...options].sort(), `${command}: its command flags and the table options it reads, nothing else`);
    for (const flag of Object.keys(COMMAND_HELP[command].meanings ?? {}))
      t.ok([...own, ...options].includes(flag), `${command}: a meaning for --${flag}, which it takes`);
    for (const f of options) read.add(f);
  }
  const unread = OPTIONS.filter((o) => o.flag !== null && !read.has(o.flag)).map((o) => o.flag);
  t.same(unread, [], 'every option of the table is read by some command');
});

t.test('an admin command gives an option its own meaning: --token-file for user-data is read, not deleted', async (t) => {
  const entry = (command: 'user-data' | 'bootstrap', flag: string) => {
    const help = commandHelpText(command);
    const start = help.indexOf(`\n  --${flag} `);
    return help.slice(start + 1, help.indexOf('\n  --', start + 1));
  };
  t.match(entry('user-data', 'token-file'), /Read the bootstrap token to hand the node from this file/);
  t.notMatch(entry('user-data', 'token-file'), /deleted/);
  t.match(entry('bootstrap', 'token-file'), /deleted with the bootstrap kubeconfig once the node has joined/);
  t.notMatch(commandHelpText('user-data'), /--kubelet-cert-dir|--listen|--lease-name/, 'no node or approver options in user-data --help');
  t.match(commandHelpText('user-data'), /apt >= 2\.4/, 'user-data --help states what the node image needs');
});
