// Writes man/cvisor.1 from the command definitions (src/cli/man-page.ts, compiled to dist/ by
// tsc first): the page the package installs, always what the CLI has.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const { manPage } = await import(join(root, "dist", "src", "cli", "man-page.js"));
mkdirSync(join(root, "man"), { recursive: true });
writeFileSync(join(root, "man", "cvisor.1"), manPage());
