// Makes the built CLI entry executable, so `npx cvisor` and the bin link work from a
// fresh build (tsc writes files without the execute bit).
import { chmodSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
for (const file of Object.values(pkg.bin ?? {})) chmodSync(join(root, file), 0o755);
