/** `persistent-queue/level`: LevelStore, the Store contract over LevelDB (level-store.ts). */
export { LEVEL_FORMAT_VERSION, LevelStore, type LevelStoreOptions } from './level-store.js';
