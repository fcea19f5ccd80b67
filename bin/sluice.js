#!/usr/bin/env node
// The `sluice` command. The TypeScript sources are compiled to dist/ by `npm install` (prepare).
import { main } from '../dist/proxy/cli/main.js';

const code = await main(process.argv.slice(2));
process.exit(code);
