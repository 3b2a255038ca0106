/**
 * `--log-level debug` lists every API request (method, URL path, status) via
 * undici's diagnostics channels: no plumbing through the client, and headers
 * (which carry the token) are never looked at.
 */
import diagnostics from 'node:diagnostics_channel';
import type { Logger } from '../log.js';

interface RequestMessage {
  request: { method: string; origin: string | URL; path: string };
  response?: { statusCode: number };
}

export function traceRequests(logger: Logger): void {
  diagnostics.subscribe('undici:request:headers', (message) => {
    const { request, response } = message as RequestMessage;
    const path = request.path.split('?')[0];
    logger.debug(`api request ${request.method} ${String(request.origin)}${path} -> ${response?.statusCode ?? '?'}`, {
      event: 'api-request',
    });
  });
  diagnostics.subscribe('undici:request:error', (message) => {
    const { request } = message as RequestMessage;
    logger.debug(`api request ${request.method} ${String(request.origin)}${request.path.split('?')[0]} failed`, { event: 'api-request' });
  });
}
