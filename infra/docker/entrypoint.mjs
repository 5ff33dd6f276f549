// Entry point of the kvroute image: `<image> APP [flags…]` runs one app in this process (PID 1, so
// SIGTERM reaches the app's own graceful shutdown directly). The app reads its flags from
// process.argv.slice(2), so the app name is taken out before it is loaded.
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { USAGE, resolveApp } from './apps.mjs';

const resolved = resolveApp(process.argv[2]);
if (resolved === undefined) {
  process.stderr.write(
    process.argv[2] === undefined ? USAGE : `unknown app ${JSON.stringify(process.argv[2])}\n${USAGE}`,
  );
  process.exit(64);
}
const { name, app } = resolved;
process.argv.splice(2, 1);

if (app.bundle !== undefined) {
  await import(new URL(`./dist/${app.bundle}`, import.meta.url).href);
} else if (app.source !== undefined) {
  const source = fileURLToPath(new URL(`./${app.source}`, import.meta.url));
  if (!existsSync(source)) {
    process.stderr.write(
      `${name} is not in this image: build the image with --target ${name} (it carries the sources and tsx)\n`,
    );
    process.exit(64);
  }
  const { register } = await import('tsx/esm/api');
  register();
  await import(pathToFileURL(source).href);
}
