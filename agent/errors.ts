/**
 * Every failure an operator can see carries its exit code and, where one
 * exists, the remedy. The CLI prints `message` as one line and exits `code`.
 *
 * Callers branch on the class (`instanceof`), never on the text: like
 * undici's errors, each class is one kind of failure with a stable meaning.
 */
export const ExitCode = {
  ok: 0,
  other: 1,
  badInput: 2,
  csrRejected: 3,
  timedOut: 4,
  /**
   * The bootstrap token is dead: kube-public/cluster-info carries no signature
   * for it, or the API server refuses it (401) when it asks for the CSR;
   * deleted, expired or mistyped: only a new token helps.
   */
  tokenNotSigned: 5,
  /** tpm: no TPM kubeboot can use (none, only /dev/tpm0, no access) or the endorsement hierarchy needs a password. */
  tpmUnavailable: 6,
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
  readonly file: string;
  readonly field: string;
  constructor(file: string, field: string, problem: string, options?: { cause?: unknown }) {
    super(`${file}: ${field}: ${problem}`, ExitCode.badInput, options);
    this.file = file;
    this.field = field;
  }
}

/**
 * An input file that exists but cannot be used as one. Carries the file and
 * the problem separately so a parser can name the field that pointed at it.
 */
export class UnreadableInputError extends KubebootError {
  override readonly name = 'UnreadableInputError';
  readonly file: string;
  readonly problem: string;
  constructor(file: string, problem: string) {
    super(`${file}: ${problem}`, ExitCode.badInput);
    this.file = file;
    this.problem = problem;
  }
}

/** The token file named by the join settings is gone: kubeboot deletes it after a join. */
export class TokenFileGoneError extends KubebootError {
  override readonly name = 'TokenFileGoneError';
  constructor(file: string) {
    super(`token file ${file} does not exist (it is deleted after a join); give a new token or a bootstrap kubeconfig`, ExitCode.badInput);
  }
}

/**
 * No bootstrap credential can authenticate: the file is missing, or the API
 * server rejected its token. Only the operator can fix it (a new file).
 */
export class BootstrapCredentialError extends KubebootError {
  override readonly name: string = 'BootstrapCredentialError';
  constructor(message: string, code: ExitCode = ExitCode.badInput) {
    super(message, code);
  }
}

/**
 * The API server refuses the bootstrap token itself (401): exit 5, as for a
 * token cluster-info is not signed for. It can come after discovery passed:
 * kube-apiserver keeps a token that authenticated for 10 s after it is deleted.
 */
export class DeadTokenError extends BootstrapCredentialError {
  override readonly name = 'DeadTokenError';
  constructor(message: string) {
    super(message, ExitCode.tokenNotSigned);
  }
}

/** The CSR was denied or failed; the API's reason is part of the message. */
export class CsrRejectedError extends KubebootError {
  override readonly name = 'CsrRejectedError';
  /** The Denied condition's reason and message, when it was denied (a TPM credential challenge is one: tpm/challenge.ts). */
  readonly denied: { reason: string; message: string } | undefined;
  constructor(message: string, denied?: { reason: string; message: string }) {
    super(message, ExitCode.csrRejected);
    this.denied = denied;
  }
}

/** The CSR can no longer lead to our certificate (deleted, replaced, or someone else's); retrying needs a new one. */
export class CsrUnusableError extends KubebootError {
  override readonly name = 'CsrUnusableError';
}

/** The issued certificate authenticates as someone other than the identity asked for. */
export class IdentityMismatchError extends KubebootError {
  override readonly name = 'IdentityMismatchError';
}

export class TimedOutError extends KubebootError {
  override readonly name = 'TimedOutError';
  constructor(message: string) {
    super(message, ExitCode.timedOut);
  }
}

/**
 * The API server could not be reached, or kept failing (5xx, 429), for the
 * whole bound: exit 1, as the exit code table says of an unreachable API.
 * Exit 4 is kept for the one wait an operator acts on: a CSR not yet approved.
 */
export class UnreachableError extends KubebootError {
  override readonly name = 'UnreachableError';
}

/** Whether a failed request was a plain request or a watch: a refused watch falls back to polling. */
export type RequestPhase = 'request' | 'watch';

/** A non-2xx answer from the API server, with the Status reason and Retry-After. */
export class ApiError extends KubebootError {
  override readonly name = 'ApiError';
  readonly status: number;
  readonly reason: string;
  readonly retryAfter: string | undefined;
  readonly phase: RequestPhase;
  constructor(o: {
    method: string;
    path: string;
    status: number;
    reason: string;
    message: string;
    retryAfter?: string;
    phase?: RequestPhase;
  }) {
    super(`${o.phase === 'watch' ? 'WATCH' : o.method} ${o.path}: ${o.status} ${o.reason}${o.message ? `: ${o.message}` : ''}`);
    this.status = o.status;
    this.reason = o.reason;
    this.retryAfter = o.retryAfter;
    this.phase = o.phase ?? 'request';
  }
}

/** The server could not be reached, the TLS handshake failed, or the connection broke: worth retrying. */
export class TransportError extends KubebootError {
  override readonly name = 'TransportError';
}

/** A response body (or one watch event) larger than the caller reads: refused, not buffered. */
export class ResponseTooLargeError extends KubebootError {
  override readonly name = 'ResponseTooLargeError';
}

/**
 * The API server answered with something other than the object asked for
 * (GET /api/v1/nodes/ answers a NodeList): never used as if it were.
 */
export class UnexpectedObjectError extends KubebootError {
  override readonly name = 'UnexpectedObjectError';
}

/** A watch's resourceVersion is too old (410 Gone): re-list, then watch again. */
export class WatchExpiredError extends KubebootError {
  override readonly name = 'WatchExpiredError';
}

/** Nothing on the node can authenticate a CSR any more; only a new bootstrap kubeconfig helps. */
export class NeedsBootstrapError extends KubebootError {
  override readonly name = 'NeedsBootstrapError';
}

export function exitCodeOf(err: unknown): ExitCode {
  return err instanceof KubebootError ? err.code : ExitCode.other;
}
