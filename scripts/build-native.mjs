// Builds the C core (native/build/libcvisor.so and cvisor-helper) with make, after
// checking that the tools exist so a missing compiler is one clear line, not a make error.
import { spawnSync } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** True when `name` (a path, or a command looked up in PATH) is an executable file. */
function findExecutable(name) {
  const candidates = name.includes("/")
    ? [name]
    : (process.env.PATH ?? "").split(delimiter).map((dir) => join(dir || ".", name));
  return candidates.some((file) => {
    try {
      accessSync(file, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

function fail(what) {
  console.error(
    `cvisor: cannot build the native core: ${what} (install gcc, e.g. apt-get install gcc make)`,
  );
  process.exit(1);
}

// $CC may carry a wrapper and flags ("ccache gcc -m64"): the first word must exist.
const cc = (process.env.CC ?? "").trim().split(/\s+/)[0] || "cc";
if (!findExecutable(cc)) fail("no C compiler found");
if (!findExecutable("make")) fail("make not found");

const result = spawnSync("make", ["-C", join(root, "native")], { stdio: "inherit" });
if (result.error) fail(`make could not run: ${result.error.message}`);
process.exit(result.status ?? 1);
