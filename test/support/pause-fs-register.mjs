import { register } from 'node:module';
register(new URL('./pause-fs-hooks.mjs', import.meta.url));
