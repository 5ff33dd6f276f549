// `npm test` runs this first: no import cycle between the TypeScript files of one project. (Cycles between
// projects are Nx's: its module-boundary lint rule refuses them.) Every .ts file under the project folders is
// read with TypeScript's own import scanner (ts.preProcessFile: imports, re-exports, dynamic imports, no type
// checking), relative specifiers are resolved as the bundler resolution does (x.ts, x/index.ts), and the
// strongly connected components of that graph (Tarjan) are the cycles. Type-only imports count too: a type
// cycle is still two files that cannot be read apart.
// Why not madge: madge 8 declares TypeScript 5 as its peer, this workspace is on TypeScript 6.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const root = resolve(import.meta.dirname, '..');
const FOLDERS = ['apps', 'libs', 'bench', 'tools', 'infra'];
const SKIP = new Set(['node_modules', 'dist', 'test-reports', 'results', '.nx']);

function tsFiles(folder, found = []) {
  for (const name of readdirSync(folder)) {
    if (SKIP.has(name) || name.startsWith('.')) continue;
    const path = join(folder, name);
    if (statSync(path).isDirectory()) tsFiles(path, found);
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) found.push(path);
  }
  return found;
}

function resolveRelative(from, specifier) {
  const base = resolve(dirname(from), specifier);
  const candidates = specifier.endsWith('.ts')
    ? [base]
    : [`${base}.ts`, join(base, 'index.ts'), base.replace(/\.js$/, '.ts')];
  return candidates.find((candidate) => existsSync(candidate) && statSync(candidate).isFile()) ?? null;
}

const files = FOLDERS.filter((folder) => existsSync(join(root, folder))).flatMap((folder) =>
  tsFiles(join(root, folder)),
);
/** file → the files it imports (relative imports only). */
const graph = new Map();
for (const file of files) {
  const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
  const targets = importedFiles
    .map((imported) => imported.fileName)
    .filter((specifier) => specifier.startsWith('./') || specifier.startsWith('../'))
    .map((specifier) => resolveRelative(file, specifier))
    .filter((target) => target !== null);
  graph.set(file, [...new Set(targets)]);
}

// Tarjan's strongly connected components, iteratively (no recursion limit on deep chains).
let counter = 0;
const index = new Map();
const low = new Map();
const onStack = new Set();
const stack = [];
const cycles = [];
for (const start of graph.keys()) {
  if (index.has(start)) continue;
  const work = [{ node: start, next: 0 }];
  index.set(start, counter);
  low.set(start, counter++);
  stack.push(start);
  onStack.add(start);
  while (work.length > 0) {
    const frame = work[work.length - 1];
    const targets = graph.get(frame.node) ?? [];
    if (frame.next < targets.length) {
      const target = targets[frame.next++];
      if (!index.has(target)) {
        index.set(target, counter);
        low.set(target, counter++);
        stack.push(target);
        onStack.add(target);
        work.push({ node: target, next: 0 });
      } else if (onStack.has(target)) {
        low.set(frame.node, Math.min(low.get(frame.node), index.get(target)));
      }
      continue;
    }
    work.pop();
    const parent = work[work.length - 1];
    if (parent) low.set(parent.node, Math.min(low.get(parent.node), low.get(frame.node)));
    if (low.get(frame.node) === index.get(frame.node)) {
      const component = [];
      let member;
      do {
        member = stack.pop();
        onStack.delete(member);
        component.push(member);
      } while (member !== frame.node);
      const selfImport = component.length === 1 && (graph.get(member) ?? []).includes(member);
      if (component.length > 1 || selfImport) cycles.push(component);
    }
  }
}

if (cycles.length > 0) {
  process.stderr.write(`import cycles: ${cycles.length}\n`);
  for (const cycle of cycles)
    process.stderr.write(
      `  ${cycle
        .map((file) => relative(root, file))
        .sort()
        .join(' ↔ ')}\n`,
    );
  process.exit(1);
}
process.stdout.write(`import cycles: none in ${files.length} files\n`);
