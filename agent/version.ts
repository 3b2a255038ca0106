// Replaced at bundle time from package.json; the fallback serves tests run from source.
declare const KUBEBOOT_VERSION: string | undefined;
export const VERSION: string = typeof KUBEBOOT_VERSION === 'string' ? KUBEBOOT_VERSION : '0.0.0-dev';
