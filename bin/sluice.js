#!/usr/bin/env node
// The `sluice` command. The TypeScript sources are compiled to dist/ by `npm install` (prepare).
import { holdHangups } from '../dist/proxy/cli/held-hangups.js';

// `serve` reloads on SIGHUP; one arriving while the rest of Sluice still loads (about half a
// second) would kill the process, so it is held from here (proxy/cli/held-hangups.ts).
if (process.argv[2] === 'serve') holdHangups();
const { main } = await import('../dist/proxy/cli/main.js');

const code = await main(process.argv.slice(2));
process.exit(code);
