#!/usr/bin/env node
// `trellis-plugin build [PROJECT] [-o OUT.wasm] [--backend quickjs|starlingmonkey]`: bundles a plugin
// project (rolldown) and builds the component with jco:
//   - issuance-policy: jco's QuickJS backend (about 1.6 MB, every WASI import stubbed out);
//   - integration, ca-connector: componentize-js (StarlingMonkey, about 12 MB) with every WASI
//     feature disabled, so the component imports only its world's interfaces. (QuickJS cannot
//     build these worlds here: its build-time linker rejects wasi:http 0.2.12's stream types.)
// The project's package.json: { "trellis": { "world": "issuance-policy", "main": "plugin.js" } }.
// Needs @bytecodealliance/jco 1.35.0 and @bytecodealliance/componentize-js 0.23.0
// (scripts/polyglot.sh installs them into target/jco/node_modules; or TRELLIS_JCO_NODE_MODULES).
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { spawnSync } from 'node:child_process';

const SDK = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const EXPORT = { 'issuance-policy': 'policy', integration: 'notifier', 'ca-connector': 'connector' };
const die = (message) => {
  console.error(`trellis-plugin build: ${message}`);
  process.exit(1);
};

function nodeModules() {
  const candidates = [process.env.TRELLIS_JCO_NODE_MODULES, join(SDK, '..', 'target', 'jco', 'node_modules'), join(process.cwd(), 'node_modules')];
  const found = candidates.find((dir) => dir && existsSync(join(dir, '@bytecodealliance', 'jco', 'package.json')));
  if (!found) die('jco not found: npm install @bytecodealliance/jco@1.35.0 @bytecodealliance/componentize-js@0.23.0 (in the Trellis repository: scripts/polyglot.sh), or set TRELLIS_JCO_NODE_MODULES');
  return found;
}

function parseArgs(argv) {
  const [command, ...rest] = argv;
  if (command !== 'build') die('usage: trellis-plugin build [PROJECT] [-o OUT.wasm] [--backend quickjs|starlingmonkey]');
  const args = { project: '.', out: undefined, backend: undefined };
  for (let i = 0; i < rest.length; i++) {
    if (rest[i] === '-o' || rest[i] === '--out') args.out = rest[++i];
    else if (rest[i] === '--backend') args.backend = rest[++i];
    else args.project = rest[i];
  }
  return args;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const project = resolve(args.project);
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')).trellis;
  } catch (err) {
    die(`${join(project, 'package.json')}: ${err.message}`);
  }
  const world = manifest?.world;
  if (!EXPORT[world]) die(`package.json "trellis.world" must be one of ${Object.keys(EXPORT).join(', ')}`);
  const main = resolve(project, manifest.main ?? 'plugin.js');
  const backend = args.backend ?? (world === 'issuance-policy' ? 'quickjs' : 'starlingmonkey');
  const out = resolve(args.out ?? join(project, 'target', `${project.split('/').pop()}.wasm`));
  const modules = nodeModules();
  const work = join(project, 'target', '.trellis-build');
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  mkdirSync(dirname(out), { recursive: true });
  const started = Date.now();

  // The entry imports exactly the world's host interfaces: the component imports nothing else.
  const httpWorld = world !== 'issuance-policy';
  const entry = [
    `import plugin from ${JSON.stringify(main)};`,
    `import { makeGuest } from ${JSON.stringify(join(SDK, 'src', 'guest.js'))};`,
    `import * as logging from 'trellis:plugin/logging@0.2.0';`,
    ...(httpWorld
      ? [
          `import * as state from 'trellis:plugin/state@0.2.0';`,
          `import * as outgoingHandler from 'wasi:http/outgoing-handler@0.2.12';`,
          `import * as httpTypes from 'wasi:http/types@0.2.12';`,
          `export const ${EXPORT[world]} = makeGuest(plugin, { logging, state, outgoingHandler, httpTypes });`,
        ]
      : [`export const ${EXPORT[world]} = makeGuest(plugin, { logging });`]),
  ].join('\n');
  writeFileSync(join(work, 'entry.js'), `${entry}\n`);

  const { rolldown } = await import(pathToFileURL(join(modules, 'rolldown', 'dist', 'index.mjs')).href);
  const bundle = await rolldown({
    input: join(work, 'entry.js'),
    external: [/^(wasi|trellis):/],
    resolve: { alias: { 'trellis-plugin-sdk/testing': join(SDK, 'src', 'testing.js'), 'trellis-plugin-sdk': join(SDK, 'src', 'index.js') } },
    logLevel: 'warn',
  });
  await bundle.write({ file: join(work, 'bundle.js'), format: 'esm' });
  await bundle.close();

  const wit = join(SDK, 'wit');
  if (backend === 'quickjs') {
    const jcoBin = join(modules, '@bytecodealliance', 'jco', 'dist', 'jco.js');
    const run = spawnSync(process.execPath, [jcoBin, 'componentize', join(work, 'bundle.js'), '-w', wit, '-n', world,
      '--backend', 'quickjs', '--backend-qjs-stub-wasi', '--backend-qjs-disable-async', '-o', out], { stdio: ['ignore', 'ignore', 'inherit'] });
    if (run.status !== 0) die(`jco componentize (QuickJS) failed with status ${run.status}`);
  } else if (backend === 'starlingmonkey') {
    // The componentize-js API directly: jco's CLI cannot read a WIT path outside its sandbox here.
    const { componentize } = await import(pathToFileURL(join(modules, '@bytecodealliance', 'componentize-js', 'src', 'componentize.js')).href);
    const { component } = await componentize({
      sourcePath: join(work, 'bundle.js'), witPath: wit, worldName: world,
      disableFeatures: ['stdio', 'random', 'clocks', 'http', 'fetch-event'],
    });
    writeFileSync(out, component);
  } else {
    die(`unknown backend ${backend}: quickjs or starlingmonkey`);
  }
  console.error(`trellis-plugin build: ${out} (${statSync(out).size} bytes, ${backend}, ${((Date.now() - started) / 1000).toFixed(1)} s)`);
  console.log(out);
}

main().catch((err) => die(err?.stack ?? String(err)));
