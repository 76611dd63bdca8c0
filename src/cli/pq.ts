#!/usr/bin/env node
/**
 * The `pq` executable (package.json "bin"). It always runs: an installed bin is reached through a
 * symlink (node_modules/.bin/pq, a global install, npx), so a check that process.argv[1] is this
 * very file would fail there and the command would silently do nothing. The code lives in
 * main.ts, which has no side effects when imported.
 */
import { run } from './main.js';

void run(process.argv.slice(2));
