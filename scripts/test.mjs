// `npm test`: every check in order, stopping at the first failure, with a header per step.
// `--only <step>` runs one step (CI runs `--only e2e` again as an unprivileged user).
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name) => join(root, "node_modules", ".bin", name);
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

/** The node:test step over the compiled suites that exist; null when none does. */
function nodeTests(dirs) {
  const present = dirs.filter((dir) => existsSync(join(root, dir)));
  for (const dir of dirs)
    if (!present.includes(dir)) console.log(`(skipped: ${dir} does not exist)`);
  if (present.length === 0) return null;
  return [process.execPath, "--test", "--test-concurrency=1", ...present];
}

const steps = [
  { name: "format", title: "prettier --check", cmd: () => [bin("prettier"), "--check", "."] },
  { name: "lint", title: "eslint", cmd: () => [bin("eslint"), "."] },
  {
    name: "build",
    title: "tsc and the CLI bundle (build:ts, also the typecheck)",
    cmd: () => [npm, "run", "--silent", "build:ts"],
  },
  {
    name: "native",
    title: "C unit tests (make -C native test, ASan/UBSan)",
    cmd: () => ["make", "-C", "native", "test"],
  },
  {
    name: "node",
    title: "node --test: unit and e2e suites",
    cmd: () => nodeTests(["dist/test/unit", "dist/test/e2e"]),
  },
  {
    name: "unit",
    title: "node --test: unit suite",
    cmd: () => nodeTests(["dist/test/unit"]),
    onlyOnRequest: true,
  },
  {
    name: "e2e",
    title: "node --test: e2e suite",
    cmd: () => nodeTests(["dist/test/e2e"]),
    onlyOnRequest: true,
  },
  {
    // The npm package installed as a user would (CI: its unprivileged user, with the tarball
    // it packed as CVISOR_PACKAGE; without it the checkout is packed first).
    name: "package",
    title: "node --test: the npm package, installed",
    cmd: () => nodeTests(["dist/test/package"]),
    onlyOnRequest: true,
  },
  {
    // The Dockerfile built and run with podman (root; CI runs it when podman is installed).
    name: "container",
    title: "node --test: the container image, built and run",
    cmd: () => nodeTests(["dist/test/container"]),
    onlyOnRequest: true,
  },
  {
    // The limits on cgroup v2, in a VM (root; CI runs it: this machine's cgroups are v1).
    name: "vm",
    title: "node --test: cgroup v2 limits, in a VM",
    cmd: () => nodeTests(["dist/test/vm"]),
    onlyOnRequest: true,
  },
];

/**
 * The host's / as a sorted list of names: the test suites must leave it as it was. Every test
 * works in its own temp tree, but a test that creates through a symlink it made (to "/")
 * wrote into / as root once; this catches any such escape, from a guest or from a test.
 */
function rootEntries() {
  return readdirSync("/").sort();
}

function checkRootUnchanged(before, step) {
  const after = rootEntries();
  const added = after.filter((name) => !before.includes(name));
  const removed = before.filter((name) => !after.includes(name));
  if (added.length === 0 && removed.length === 0) return;
  const list = (xs) => xs.map((name) => `/${name}`).join(", ");
  console.error(
    `\ntest: step "${step}" changed the host's /:` +
      (added.length ? ` added ${list(added)}` : "") +
      (removed.length ? ` removed ${list(removed)}` : ""),
  );
  process.exit(1);
}

const args = process.argv.slice(2);
const onlyAt = args.indexOf("--only");
const only = onlyAt >= 0 ? args[onlyAt + 1] : undefined;
if (onlyAt >= 0 && !steps.some((step) => step.name === only)) {
  console.error(`test: --only takes one of: ${steps.map((step) => step.name).join(", ")}`);
  process.exit(2);
}

const selected = only
  ? steps.filter((step) => step.name === only)
  : steps.filter((step) => !step.onlyOnRequest);
for (const step of selected) {
  console.log(`\n=== ${step.name}: ${step.title} ===`);
  const cmd = step.cmd();
  if (cmd === null) {
    console.error(`test: ${step.name}: no compiled test suite found (run npm run build:ts first)`);
    process.exit(1);
  }
  const [file, ...rest] = cmd;
  const before = rootEntries();
  const result = spawnSync(file, rest, { cwd: root, stdio: "inherit" });
  checkRootUnchanged(before, step.name);
  if (result.error) {
    console.error(`test: ${step.name}: ${result.error.message}`);
    process.exit(1);
  }
  if (result.status !== 0) {
    console.error(`\ntest: step "${step.name}" failed (exit ${result.status ?? result.signal})`);
    process.exit(result.status || 1);
  }
}
// No closing line of our own: the last step's summary (node:test) stays the last word.
