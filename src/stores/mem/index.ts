/** MemStore, the reference Store (mem-store.ts), as the package's main entry point offers it. */
export { MemStore, type MemStoreOptions } from './mem-store.js';
