// @peculiar/x509 relies on tsyringe, which needs the Reflect metadata API
// loaded first; import x509 only through this module.
import 'reflect-metadata';
export * as x509 from '@peculiar/x509';
