// The npm package as a user meets it: `npm pack`'s tarball installed into an empty prefix, by
// whoever runs this (CI: its unprivileged user), with npm's own cache in a temp dir and no C
// compiler on PATH. Then the CLI (doctor, uname, a named sandbox, caches), the library from a
// fresh project (imported and typechecked), and the install that has to build the core itself.
// CVISOR_PACKAGE names the tarball (.ci/run packs it as root); without it this file packs the
// checkout. `node scripts/test.mjs --only package` runs it.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { gtest } from "../helpers/guard.js";
import { HELLO_TEXT, NESTED_TEXT } from "../helpers/fixture.js";
import { repoRoot, runProcess, show, tempRoot, type CliResult } from "../helpers/repo.js";

/** Compilers and build drivers: none of them may be on the PATH the installs see. */
const BUILD_TOOL =
  /^(?:[\w.]+-)*(?:cc|c\+\+|c89|c99|gcc|g\+\+|cpp|clang|clang\+\+|tcc|ld|ld\.\w+|as|make|gmake)(?:-[\d.]+)?$/;
const INSTALL_TIMEOUT = 8 * 60_000;

let work = "";
let tarball = "";
let home = "";
/** A directory of links to every program on this machine's PATH but compilers and make. */
let noCompilerBin = "";
/**
 * This machine's npm settings file (its registry, CA, proxy). An install with --prefix reads
 * PREFIX/etc/npmrc instead, so the test names the machine's own, as a user's config would.
 */
let globalConfig = "";

before(() => {
  work = mkdtempSync(join(tempRoot(), "cvisor-package-"));
  home = join(work, "home");
  mkdirSync(home);
  tarball = process.env.CVISOR_PACKAGE ?? pack(join(work, "pack"));
  const config = spawnSync("npm", ["config", "get", "globalconfig"], { encoding: "utf8" });
  globalConfig = config.stdout.trim();
  assert.ok(config.status === 0 && globalConfig, `npm config get globalconfig: ${config.stderr}`);
  noCompilerBin = join(work, "bin");
  mkdirSync(noCompilerBin);
  const dirs = ["/usr/local/bin", "/usr/bin", "/bin", dirname(process.execPath)];
  for (const dir of dirs) {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) {
      const link = join(noCompilerBin, name);
      if (BUILD_TOOL.test(name) || existsSync(link)) continue;
      symlinkSync(join(dir, name), link);
    }
  }
});

after(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** `npm pack` of the checkout into `dir` (its prepack puts the prebuilt core in). */
function pack(dir: string): string {
  mkdirSync(dir);
  const r = spawnSync("npm", ["pack", "--pack-destination", dir], {
    cwd: repoRoot,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  assert.equal(r.status, 0, `npm pack failed:\n${r.stderr}`);
  const name = r.stdout.trim().split("\n").pop() ?? "";
  return join(dir, name);
}

/** The environment of a user's shell here: a home of its own, npm's cache in it. */
function userEnv(path: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const passed = ["NODE_EXTRA_CA_CERTS", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"]
    .concat(["NO_PROXY", "no_proxy"])
    .flatMap((name) => (process.env[name] ? [[name, process.env[name]]] : []));
  return {
    ...Object.fromEntries(passed),
    HOME: home,
    PATH: path,
    LANG: "C.UTF-8",
    npm_config_globalconfig: globalConfig,
    npm_config_cache: join(work, "npm-cache"),
    npm_config_update_notifier: "false",
    npm_config_fund: "false",
    npm_config_audit: "false",
    ...extra,
  };
}

function npm(args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<CliResult> {
  return runProcess("npm", args, { cwd, env, timeoutMs: INSTALL_TIMEOUT });
}

/** `npm install -g TARBALL` into a new empty prefix; its bin/ first on PATH for what follows. */
async function installGlobal(
  name: string,
  path: string,
  extra: Record<string, string> = {},
): Promise<{ prefix: string; result: CliResult; env: NodeJS.ProcessEnv; pkg: string }> {
  const prefix = join(work, name);
  mkdirSync(prefix);
  const result = await npm(
    ["install", "-g", "--prefix", prefix, tarball],
    work,
    userEnv(path, extra),
  );
  const env = userEnv(`${join(prefix, "bin")}:${path}`);
  return { prefix, result, env, pkg: join(prefix, "lib", "node_modules", "cvisor") };
}

function run(args: string[], env: NodeJS.ProcessEnv, cwd = home): Promise<CliResult> {
  return runProcess("cvisor", args, { cwd, env, timeoutMs: 60_000 });
}

interface DoctorReport {
  ok: boolean;
  checks: { id: string; status: string; detail: string }[];
}

async function doctor(env: NodeJS.ProcessEnv): Promise<DoctorReport> {
  const r = await run(["doctor", "--json"], env);
  assert.equal(r.code, 0, show(r));
  return JSON.parse(r.out) as DoctorReport;
}

function helperDetail(report: DoctorReport): string {
  const check = report.checks.find((c) => c.id === "helper");
  assert.ok(check, `doctor has no helper check: ${JSON.stringify(report.checks.map((c) => c.id))}`);
  return check.detail;
}

test("the tarball holds the built CLI and library, the C sources and a prebuilt core, no test or bench file", (t) => {
  const r = spawnSync("tar", ["tzf", tarball], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const files = r.stdout
    .trim()
    .split("\n")
    .map((line) => line.replace(/^package\//, ""));
  for (const needed of [
    "package.json",
    "README.md",
    "dist/cvisor.cjs",
    "dist/cli.cjs",
    "dist/src/index.js",
    "dist/src/index.d.ts",
    "man/cvisor.1",
    "native/Makefile",
    "native/include/cvisor.h",
    "native/src/filter/table.c",
    "native/prebuilt/linux-x64/libcvisor.so",
    "native/prebuilt/linux-x64/cvisor-helper",
    "native/prebuilt/linux-x64/libcvisor-shim.so",
    "scripts/install.mjs",
    "scripts/build-native.mjs",
  ]) {
    assert.ok(files.includes(needed), `the tarball lacks ${needed}`);
  }
  const unwanted = files.filter(
    (f) =>
      /(^|\/)(test|tests|bench|fixtures|node_modules)\//.test(f) ||
      /\.(test\.[cm]?js|map|ts)$/.test(f.replace(/\.d\.ts$/, "")) ||
      /^native\/build\//.test(f) ||
      /^scripts\/(?!install\.mjs$|build-native\.mjs$)/.test(f),
  );
  assert.deepEqual(unwanted, [], "files a user does not need");
  t.diagnostic(`tarball: ${statSync(tarball).size} bytes, ${files.length} files`);
});

test("no compiler or make is reachable on the PATH the installs get", () => {
  const r = spawnSync("sh", ["-c", "command -v cc gcc g++ clang make musl-gcc"], {
    env: { PATH: noCompilerBin },
    encoding: "utf8",
  });
  assert.equal(r.stdout, "", "found build tools");
});

gtest(
  "npm install -g of the tarball with no compiler: doctor, uname, a named sandbox, caches, the man page",
  async (fx) => {
    const { result, env, pkg, prefix } = await installGlobal("global", noCompilerBin);
    assert.equal(result.code, 0, show(result));
    assert.ok(!existsSync(join(pkg, "native", "build")), "the install built a core");

    // The prebuilt core serves this machine: doctor passes and names it.
    const report = await doctor(env);
    assert.equal(report.ok, true, JSON.stringify(report.checks, null, 1));
    assert.match(helperDetail(report), /native\/prebuilt\/linux-x64\/cvisor-helper$/);
    // And the guests' shim comes from it too (fstat native in guests).
    const shim = report.checks.find((c) => c.id === "shim");
    assert.match(shim?.detail ?? "", /native\/prebuilt\/linux-x64\/libcvisor-shim\.so$/);

    // All but the host name, which a sandbox has its own of.
    const native = spawnSync("uname", ["-srvmo"], { encoding: "utf8" });
    const uname = await run(["--", "uname", "-srvmo"], env);
    assert.equal(uname.code, 0, show(uname));
    assert.equal(uname.out, native.stdout);

    // A named sandbox keeps its files from run to run; the host never sees them.
    const made = fx.p("made-in-sandbox.txt");
    let r = await run(["--sandbox", "pkg", "--", "sh", "-c", `echo kept > ${made}`], env);
    assert.equal(r.code, 0, show(r));
    assert.ok(!existsSync(made), "the sandbox wrote the host");
    r = await run(["--sandbox", "pkg", "--", "cat", made, fx.p("hello.txt")], env);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, `kept\n${HELLO_TEXT}`);
    r = await run(["rm", "pkg"], env);
    assert.equal(r.code, 0, show(r));

    // A cache saved and restored.
    const restored = join(fx.scratch, "restored");
    r = await run(["cache", "save", "deps-1", fx.p("sub")], env);
    assert.equal(r.code, 0, show(r));
    r = await run(["cache", "restore", "deps-", restored], env);
    assert.equal(r.code, 0, show(r));
    assert.equal(readFileSync(join(restored, "nested.txt"), "utf8"), NESTED_TEXT);

    // zstd needs zstd-napi's native module, built at install (a prebuilt needs the internet,
    // else a compiler): with neither it is left out, and --format zstd says so in one line.
    const zstdBuilt = ["cvisor/node_modules/zstd-napi", "zstd-napi"].some((at) =>
      existsSync(join(prefix, "lib", "node_modules", at, "build", "Release", "binding.node")),
    );
    r = await run(["cache", "save", "--format", "zstd", "deps-zstd", fx.p("sub")], env);
    if (zstdBuilt) {
      assert.equal(r.code, 0, show(r));
    } else {
      assert.notEqual(r.code, 0, show(r));
      const lines = r.err.trim().split("\n");
      assert.equal(lines.length, 1, show(r));
      assert.match(lines[0] ?? "", /^cvisor: --format zstd needs zstd-napi, .*gzip/);
    }

    // npm links the man page of a global install.
    assert.ok(existsSync(join(prefix, "share", "man", "man1", "cvisor.1")), "no man page");
  },
  { timeout: INSTALL_TIMEOUT + 120_000 },
);

gtest(
  'a fresh project: npm install --ignore-scripts of the tarball, then import { Sandbox } from "cvisor", typed',
  async (fx) => {
    const project = join(fx.scratch, "app");
    mkdirSync(project);
    writeFileSync(
      join(project, "package.json"),
      JSON.stringify({ name: "app", version: "1.0.0", private: true, type: "module" }),
    );
    const env = userEnv(noCompilerBin);
    // --ignore-scripts, as cautious users install: no install step checks or places the core,
    // and the library finds the prebuilt one at run time.
    const install = await npm(["install", "--ignore-scripts", tarball], project, env);
    assert.equal(install.code, 0, show(install));

    const source = [
      'import { Sandbox } from "cvisor";',
      "const sb = new Sandbox({ network: false });",
      `const r = await sb.run(["cat", ${JSON.stringify(fx.p("hello.txt"))}]);`,
      "const code: number = r.exitCode;",
      "process.stdout.write(`${code} ${String(r.stdout)}`);",
      "",
    ].join("\n");
    writeFileSync(join(project, "app.ts"), source);
    // The package's types, as a strict TypeScript project sees them (the checkout's compiler).
    const tsc = join(repoRoot, "node_modules", "typescript", "bin", "tsc");
    const types = join(repoRoot, "node_modules", "@types");
    const check = await runProcess(
      process.execPath,
      [tsc, "--strict", "--module", "nodenext", "--target", "es2022", "--outDir", "out"].concat([
        "--typeRoots",
        types,
        "--types",
        "node",
        "app.ts",
      ]),
      { cwd: project, env, timeoutMs: 120_000 },
    );
    assert.equal(check.code, 0, show(check));

    const r = await runProcess(process.execPath, [join("out", "app.js")], {
      cwd: project,
      env,
      timeoutMs: 60_000,
    });
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, `0 ${HELLO_TEXT}`);
  },
  { timeout: INSTALL_TIMEOUT + 120_000 },
);

gtest(
  "no prebuilt fits: the install builds the core from the shipped sources, or says what to install",
  async () => {
    // CVISOR_BUILD_FROM_SOURCE stands in for a machine the prebuilt does not serve.
    const without = await installGlobal("no-compiler", noCompilerBin, {
      CVISOR_BUILD_FROM_SOURCE: "1",
    });
    assert.notEqual(without.result.code, 0, show(without.result));
    assert.match(
      without.result.err,
      /cvisor: cannot build the native core: no C compiler found \(install gcc/,
    );

    const withCc = await installGlobal("from-source", process.env.PATH ?? "/usr/bin:/bin", {
      CVISOR_BUILD_FROM_SOURCE: "1",
    });
    assert.equal(withCc.result.code, 0, show(withCc.result));
    assert.ok(existsSync(join(withCc.pkg, "native", "build", "libcvisor.so")), "nothing built");
    const report = await doctor(withCc.env);
    assert.match(helperDetail(report), /native\/build\/cvisor-helper$/);
    const r = await run(["--", "sh", "-c", "echo built-here"], withCc.env);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, "built-here\n");
  },
  { timeout: 2 * INSTALL_TIMEOUT },
);
