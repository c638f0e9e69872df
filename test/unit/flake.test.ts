// flake.nix, checked as far as a machine without nixpkgs can: it parses, and it evaluates
// (nix flake show / check --no-build) with nixpkgs replaced by a stand-in that records what the
// flake hands its builders (test/fixtures/nixpkgs-stub). Building it needs nixpkgs and the
// internet. Nix keeps what it copies in a store of this test's own, never /nix.
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { join, relative } from "node:path";
import { after, before, test } from "node:test";
import { fixtureSources, repoRoot, runProcess, show, tempRoot, which } from "../helpers/repo.js";

const skip = which("nix") ? false : "nix is not installed (apt-get install nix-bin)";
const SYSTEM = "x86_64-linux";
const stub = join(fixtureSources, "nixpkgs-stub");
let work = "";
let flake = "";

interface Manifest {
  version: string;
  files: string[];
  scripts: Record<string, string>;
}
const manifest = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as Manifest;

before(() => {
  if (skip) return;
  work = mkdtempSync(join(tempRoot(), "cvisor-flake-"));
  // The checkout as a fresh clone has it (a path: flake is copied whole into the store).
  flake = join(work, "src");
  const left = new Set(["node_modules", "dist", ".git", "native/build", "native/prebuilt"]);
  cpSync(repoRoot, flake, {
    recursive: true,
    filter: (from) => !left.has(relative(repoRoot, from)),
  });
});

after(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** This test's own store, so that nothing is made in /nix. */
function ownStore(): string[] {
  return ["--option", "build-users-group", "", "--store", join(work, "store")];
}

function nix(args: string[]) {
  const common = ["--extra-experimental-features", "nix-command flakes"];
  const input = ["--offline", "--override-input", "nixpkgs", `path:${stub}`];
  return runProcess("nix", [...common, ...ownStore(), ...args, ...input], {
    cwd: work,
    timeoutMs: 120_000,
  });
}

async function evalJson<T>(attr: string): Promise<T> {
  const r = await nix(["eval", "--json", `path:${flake}#${attr}`]);
  assert.equal(r.code, 0, show(r));
  return JSON.parse(r.out) as T;
}

test("flake.nix parses", { skip }, async () => {
  // Its own store too: without one, even a parse makes /nix.
  const store = ["--option", "build-users-group", "", "--store", join(work, "store")];
  const r = await runProcess(
    "nix-instantiate",
    [...store, "--parse", join(repoRoot, "flake.nix")],
    {
      timeoutMs: 30_000,
    },
  );
  assert.equal(r.code, 0, show(r));
});

test(
  "the flake's outputs: a package, an app and a dev shell for x86_64-linux",
  { skip },
  async () => {
    const show_ = await nix(["flake", "show", `path:${flake}`]);
    assert.equal(show_.code, 0, show(show_));
    const plain = show_.out.replace(new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g"), "");
    assert.match(plain, new RegExp(`cvisor: package 'cvisor-${manifest.version}'`));
    assert.match(plain, /default: app/);
    assert.match(plain, /default: development environment/);
    const check = await nix(["flake", "check", "--no-build", `path:${flake}`]);
    assert.equal(check.code, 0, show(check));

    const program = await evalJson<string>(`apps.${SYSTEM}.default.program`);
    assert.match(program, new RegExp(`-cvisor-${manifest.version}/bin/cvisor$`));
    const shell = await evalJson<string[]>(`devShells.${SYSTEM}.default.packageNames`);
    for (const tool of ["nodejs-20", "gcc", "gnumake", "musl"])
      assert.ok(shell.includes(tool), tool);
  },
);

test(
  "the package: Node 20, npm run build, every source the npm package ships, the lock as its pin",
  { skip },
  async () => {
    const given = await evalJson<{
      version: string;
      nodejs: string;
      npmBuildScript: string;
      postBuild: string;
      postInstall: string;
      srcRoot: string;
      srcFiles: string[];
      npmDepsRoot: string;
    }>(`packages.${SYSTEM}.default.given`);
    assert.equal(given.version, manifest.version);
    assert.equal(given.nodejs, "nodejs-20");
    assert.ok(manifest.scripts[given.npmBuildScript], `no script ${given.npmBuildScript}`);
    // The dependencies come from the package's own lockfile.
    assert.equal(given.npmDepsRoot, given.srcRoot);
    assert.ok(given.srcFiles.includes("package-lock.json"));
    // What package.json's files takes from the sources (not from the build) is in the source.
    const covered = (file: string): boolean =>
      given.srcFiles.some((src) => file === src || file.startsWith(`${src.replace(/\/$/, "")}/`));
    const fromSources = manifest.files.filter(
      (f) => !f.startsWith("!") && !/^(dist|man|native\/prebuilt)\//.test(f),
    );
    for (const file of fromSources)
      assert.ok(covered(file.replace(/\/$/, "")), `${file} not in src`);
    for (const script of given.postBuild.match(/scripts\/[\w-]+\.mjs/g) ?? []) {
      assert.ok(covered(script), `${script} not in src`);
    }
    assert.match(given.postInstall, /installManPage man\/cvisor\.1/);
  },
);
