// A Node built-in module loaded when first needed, from synchronous code that both the CLI
// bundle (CommonJS) and the library (ESM) run: a static import would load it at every start
// (node:child_process, node:crypto for the credential broker), and `node:module`'s
// createRequire would bring in the ESM loader.
import { SetupError } from "./errors.js";

export function builtin<T>(name: string): T {
  const get = (process as { getBuiltinModule?: (id: string) => unknown }).getBuiltinModule;
  if (get) return get(name) as T;
  // The CLI bundle on a Node 20 older than 20.16 (the library, ESM, has no require there).
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  if (typeof require === "function") return require(name) as T;
  throw new SetupError(`${name} cannot be loaded here: Node 20.16 or later is needed`, "ENODE");
}
