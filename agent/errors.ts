/**
 * Every failure an operator can see carries its exit code and, where one
 * exists, the remedy. The CLI prints `message` as one line and exits `code`.
 */
export const ExitCode = {
  ok: 0,
  other: 1,
  badInput: 2,
  csrRejected: 3,
  timedOut: 4,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

export class KubebootError extends Error {
  override readonly name: string = 'KubebootError';
  readonly code: ExitCode;
  constructor(message: string, code: ExitCode = ExitCode.other, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** Bad configuration or input file: names the file and the field. */
export class InputError extends KubebootError {
  override readonly name = 'InputError';
  constructor(file: string, field: string, problem: string) {
    super(`${file}: ${field}: ${problem}`, ExitCode.badInput);
  }
}

/** The CSR was denied or failed; the API's reason is part of the message. */
export class CsrRejectedError extends KubebootError {
  override readonly name = 'CsrRejectedError';
  constructor(message: string) {
    super(message, ExitCode.csrRejected);
  }
}

export class TimedOutError extends KubebootError {
  override readonly name = 'TimedOutError';
  constructor(message: string) {
    super(message, ExitCode.timedOut);
  }
}

export function exitCodeOf(err: unknown): ExitCode {
  return err instanceof KubebootError ? err.code : ExitCode.other;
}
