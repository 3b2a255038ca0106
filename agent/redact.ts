/**
 * Removes secrets from free text (log messages, a hook's stderr): bootstrap
 * token secrets, bearer tokens, PEM private keys, and the kubeconfig fields
 * that carry secrets (`token:`, `client-key-data:`, `password:`), whatever
 * their value looks like.
 */
const PEM_KEY = /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)/g;
const BOOTSTRAP_TOKEN = /\b([a-z0-9]{6})\.[a-z0-9]{16}\b/g;
const BEARER = /(Bearer\s+)[A-Za-z0-9._~+/=-]+/gi;
// As a YAML key at the start of a line, a JSON key, or key=value; not prose
// such as "config.yaml: token: not a bootstrap token", which kubeboot writes.
// Every pattern runs on untrusted text (a CSR's name, a hook's output), so
// none may backtrack more than linearly: no two adjacent quantifiers over
// characters they share. (`^\s*-?\s*` was cubic on runs of "\n ": a 7,000-
// character CSR name held the approver's event loop for 20 s.) Indentation is
// spaces and tabs only; one line break may stand between key and value.
const SECRET_KEYS = '(?:token|client-key-data|password)';
const YAML_SECRET = new RegExp(`^([ \\t]*(?:-[ \\t]*)?${SECRET_KEYS}:[ \\t]*(?:\\r?\\n[ \\t]*)?)\\S+`, 'gim');
const JSON_SECRET = new RegExp(`("${SECRET_KEYS}"\\s*:\\s*")[^"]*`, 'gi');
const ASSIGNED_SECRET = new RegExp(`(\\b${SECRET_KEYS}=)\\S+`, 'gi');

export function scrub(text: string): string {
  return text
    .replace(PEM_KEY, '[private key redacted]')
    .replace(BEARER, '$1[redacted]')
    .replace(YAML_SECRET, '$1[redacted]')
    .replace(JSON_SECRET, '$1[redacted]')
    .replace(ASSIGNED_SECRET, '$1[redacted]')
    .replace(BOOTSTRAP_TOKEN, '$1.[redacted]');
}
