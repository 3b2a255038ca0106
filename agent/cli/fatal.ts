/**
 * What the CLI prints when a command fails: one line per error, as every log
 * line is. An error may carry a server's words (a Status message from an API
 * server not yet trusted, during discovery) with newlines, `<0>` or ESC in
 * them: under systemd a raw newline would start a forged journal entry.
 */
import { KubebootError } from '../errors.js';
import { scrub } from '../redact.js';
import { bounded, escapeControl, MAX_LOG_STRING } from '../text.js';

const oneLine = (text: string): string => escapeControl(bounded(scrub(text), MAX_LOG_STRING));

/** `kubeboot: <message>`, and the stack of an unexpected error when debugging. */
export function fatalText(err: unknown, debug: boolean): string {
  const message = err instanceof Error ? err.message : String(err);
  const stack = !(err instanceof KubebootError) && err instanceof Error && err.stack && debug ? `${oneLine(err.stack)}\n` : '';
  return `kubeboot: ${oneLine(message)}\n${stack}`;
}
