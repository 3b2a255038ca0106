/**
 * kubeboot's entry point: parse configuration, dispatch the command, turn
 * every failure into one line on stderr and its documented exit code.
 */
import os from 'node:os';
import { loadConfig } from '../config/load.js';
import { ExitCode, exitCodeOf, KubebootError } from '../errors.js';
import { createLogger, scrub } from '../log.js';
import { VERSION } from '../version.js';
import { readOptional } from '../bootstrap/existing.js';
import { helpText } from './help.js';
import { traceRequests } from './trace.js';
import { runBootstrap } from './bootstrap.js';
import { runCheck } from './check.js';
import { runStatus } from './status.js';
import { runDaemonCommand } from './run.js';
import { runRenew } from './renew.js';

async function main(argv: string[]): Promise<number> {
  const load = () => loadConfig({ argv, env: process.env, readFile: readOptional, hostname: os.hostname() });
  const loaded = await load();
  if (loaded.version) {
    process.stdout.write(`kubeboot ${VERSION} (node ${process.version})\n`);
    return ExitCode.ok;
  }
  if (loaded.help || loaded.command === null) {
    process.stdout.write(helpText());
    return loaded.help ? ExitCode.ok : ExitCode.badInput;
  }
  const { config } = loaded;
  const logger = createLogger({ level: config.log.level, format: config.log.format });
  if (config.log.level === 'debug') traceRequests(logger);
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals): void => {
    logger.info(`received ${signal}; stopping`);
    stop.abort(new KubebootError(`interrupted by ${signal}`));
  };
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  try {
    switch (loaded.command) {
      case 'bootstrap':
        return await runBootstrap(config, logger, stop.signal);
      case 'check':
        return await runCheck(config, logger);
      case 'status':
        return await runStatus(config, loaded.extraFlags.output);
      case 'run':
        return await runDaemonCommand(config, logger, stop.signal, async () => (await load()).config);
      case 'renew':
        return await runRenew(config, logger, loaded.extraFlags.identity, stop.signal);
    }
  } finally {
    await new Promise<void>((resolve) => logger.on('finish', resolve).end());
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`kubeboot: ${scrub(message)}\n`);
    if (!(err instanceof KubebootError) && err instanceof Error && err.stack && process.env.KUBEBOOT_DEBUG) process.stderr.write(scrub(err.stack) + '\n');
    process.exitCode = exitCodeOf(err);
  },
);
