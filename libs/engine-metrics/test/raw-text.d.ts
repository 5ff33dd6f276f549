/** Vite's `?raw` suffix: the file's text as the default export (vitest loads fixtures this way, no node:fs). */
declare module '*?raw' {
  const text: string;
  export default text;
}
