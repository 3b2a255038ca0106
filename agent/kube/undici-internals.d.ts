// Types for the two undici files undici-core.ts loads directly: undici's own
// public types for what they export (module.exports of each file).
declare module 'undici/lib/dispatcher/agent.js' {
  import type { Agent } from 'undici';
  const UndiciAgent: typeof Agent;
  export default UndiciAgent;
}

declare module 'undici/lib/api/api-request.js' {
  import type { Dispatcher } from 'undici';
  function request(this: Dispatcher, options: Dispatcher.RequestOptions): Promise<Dispatcher.ResponseData>;
  export default request;
}
