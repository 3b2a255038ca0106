/** Removes secrets from free text: bootstrap token secrets, bearer tokens, PEM private keys. */
const PEM_KEY = /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)/g;
const BOOTSTRAP_TOKEN = /\b([a-z0-9]{6})\.[a-z0-9]{16}\b/g;
const BEARER = /(Bearer\s+)[A-Za-z0-9._~+/=-]+/gi;

export function scrub(text: string): string {
  return text
    .replace(PEM_KEY, '[private key redacted]')
    .replace(BEARER, '$1[redacted]')
    .replace(BOOTSTRAP_TOKEN, '$1.[redacted]');
}
