// A software TPM for the tests: swtpm manufactured by swtpm_setup with a
// private swtpm_localca standing in for the TPM vendor (an RSA-2048 EK at
// 0x81010001, its certificate at NV 0x01C00002, and an ECC P-384 EK), then
// served raw on loopback TCP by `swtpm socket`, which tpm2-tools reach with
// TPM2TOOLS_TCTI=swtpm:host=127.0.0.1,port=P and kubeboot with
// --tpm-swtpm-tcp 127.0.0.1:P. Debian packages swtpm, swtpm-tools,
// tpm2-tools, libtss2-tcti-swtpm0 (scripts/system-deps.sh).
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startComponent, startOnFreePorts, stopComponent, waitReady, type Component } from './processes.js';

const run = promisify(execFile);

/** A manufactured TPM's state and the stand-in vendor CA that signed its EK certificate. */
export interface ManufacturedTpm {
  dir: string;
  stateDir: string;
  /** The local CA's root and intermediate (issuer) certificates, PEM: what `--ek-ca` is given. */
  caBundleFile: string;
  rootCaFile: string;
  issuerCaFile: string;
}

export interface Swtpm extends ManufacturedTpm {
  port: number;
  ctrlPort: number;
  /** `127.0.0.1:PORT`, as --tpm-swtpm-tcp takes it. */
  address: string;
  /** The environment for tpm2-tools against this TPM (TPM2TOOLS_TCTI). */
  toolsEnv: NodeJS.ProcessEnv;
  component: Component;
  stop(): Promise<void>;
}

/**
 * Manufactures a TPM into a fresh temp dir (about 1-2 s): a CA of its own
 * when `ca` is not given, else signed by that one (two machines of one vendor).
 */
export async function manufactureTpm(ca?: ManufacturedTpm): Promise<ManufacturedTpm> {
  const dir = mkdtempSync(path.join(tmpdir(), 'kubeboot-swtpm-'));
  const stateDir = path.join(dir, 'state');
  const caDir = ca === undefined ? path.join(dir, 'ca') : path.dirname(ca.issuerCaFile);
  mkdirSync(stateDir);
  mkdirSync(caDir, { recursive: true });
  const localca = path.join(dir, 'localca.conf');
  writeFileSync(
    localca,
    [
      `statedir = ${caDir}`,
      `signingkey = ${caDir}/signkey.pem`,
      `issuercert = ${caDir}/issuercert.pem`,
      `certserial = ${caDir}/certserial`,
      '',
    ].join('\n'),
  );
  const setup = path.join(dir, 'setup.conf');
  writeFileSync(
    setup,
    [
      'create_certs_tool = /usr/bin/swtpm_localca',
      `create_certs_tool_config = ${localca}`,
      'create_certs_tool_options = /dev/null',
      'active_pcr_banks = sha256',
      '',
    ].join('\n'),
  );
  const logfile = path.join(dir, 'swtpm_setup.log');
  try {
    await run(
      'swtpm_setup',
      ['--tpm2', '--tpmstate', stateDir, '--create-ek-cert', '--lock-nvram', '--config', setup, '--logfile', logfile],
      { timeout: 60_000 },
    );
  } catch (err) {
    throw new Error(`swtpm_setup failed: ${(err as Error).message}\n${readOr(logfile)}`);
  }
  const rootCaFile = path.join(caDir, 'swtpm-localca-rootca-cert.pem');
  const issuerCaFile = path.join(caDir, 'issuercert.pem');
  const caBundleFile = path.join(dir, 'ek-ca.pem');
  writeFileSync(caBundleFile, readFileSync(issuerCaFile, 'utf8') + readFileSync(rootCaFile, 'utf8'));
  return { dir, stateDir, caBundleFile, rootCaFile, issuerCaFile };
}

/**
 * Serves a manufactured TPM on two loopback ports, P (commands) and P+1
 * (control). swtpm serves one connection at a time: close kubeboot's
 * connection before running a tpm2-tools command, and the other way round.
 */
export async function startSwtpm(tpm: ManufacturedTpm): Promise<Swtpm> {
  let component: Component | undefined;
  // tpm2-tools' swtpm TCTI finds the control channel at the command port + 1.
  const [port] = (await startOnFreePorts(
    1,
    ([p]) => {
      const c = (p as number) + 1;
      component = startComponent(
        'swtpm',
        'swtpm',
        [
          'socket',
          '--tpm2',
          '--tpmstate',
          `dir=${tpm.stateDir}`,
          '--server',
          `type=tcp,port=${p},bindaddr=127.0.0.1`,
          '--ctrl',
          `type=tcp,port=${c},bindaddr=127.0.0.1`,
          '--flags',
          'not-need-init,startup-clear',
        ],
        path.join(tpm.dir, 'swtpm.log'),
      );
      return component;
    },
    // Ready once the control port accepts a connection (swtpm opens both before serving).
    (c, [p]) => waitReady(c, 'swtpm control port', () => canConnect((p as number) + 1), 10_000),
  )) as [number];
  const ctrlPort = port + 1;
  const started = component as Component;
  return {
    ...tpm,
    port,
    ctrlPort,
    address: `127.0.0.1:${port}`,
    toolsEnv: { ...process.env, TPM2TOOLS_TCTI: `swtpm:host=127.0.0.1,port=${port}` },
    component: started,
    stop: () => stopComponent(started, 5_000),
  };
}

/** A manufactured and started swtpm whose directory goes with it. */
export async function withSwtpm<T>(use: (tpm: Swtpm) => Promise<T>, ca?: ManufacturedTpm): Promise<T> {
  const tpm = await startSwtpm(await manufactureTpm(ca));
  try {
    return await use(tpm);
  } finally {
    await tpm.stop();
    rmSync(tpm.dir, { recursive: true, force: true });
  }
}

/** Runs a tpm2-tools command against the swtpm; returns stdout. */
export async function tpm2(tpm: Swtpm, tool: string, args: string[], cwd = tpm.dir): Promise<string> {
  try {
    const { stdout } = await run(tool, args, { env: tpm.toolsEnv, cwd, timeout: 30_000, encoding: 'utf8' });
    return stdout;
  } catch (err) {
    const e = err as Error & { stderr?: string };
    throw new Error(`${tool} ${args.join(' ')}: ${e.message}${e.stderr ? `\n${e.stderr}` : ''}`);
  }
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

function readOr(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}
