// The Dockerfile, built and run for real with podman (rootful, runc): the image builds from the
// checkout, and cvisor works inside it as the image's user and as root. Without a registry the
// base image its FROM names is made here (base-image.sh: debootstrap and this machine's Node
// 20). Also: under a Docker-like seccomp profile (pidfd_getfd only with CAP_SYS_PTRACE) doctor
// says what to add and `--cap-add SYS_PTRACE` is enough. `node scripts/test.mjs --only
// container` runs it (CI does, as root, when podman is installed).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { repoRoot, runProcess, show, tempRoot, which, type CliResult } from "../helpers/repo.js";

const BASE = "docker.io/library/node:20-bookworm-slim";
const IMAGE = `localhost/cvisor-test:${process.pid}`;
const VOLUME = `cvisor-test-state-${process.pid}`;
// Rootful podman on this kind of machine: runc, and limits the default runtime config lacks.
const RUNTIME = ["--runtime", "runc"];
const LIMITS = ["--ulimit", "nofile=1024:20000", "--ulimit", "nproc=4096:32768"];

const skip =
  process.getuid?.() !== 0
    ? "needs root (rootful podman)"
    : !which("podman")
      ? "podman is not installed (apt-get install podman runc)"
      : false;

let work = "";
let imagesBefore: string[] = [];

/** The ids of every image podman holds, intermediate ones included. */
function images(): string[] {
  const r = spawnSync("podman", ["images", "--all", "--quiet", "--no-trunc"], { encoding: "utf8" });
  return r.stdout.split("\n").filter(Boolean);
}

function podman(args: string[], timeoutMs = 120_000): Promise<CliResult> {
  return runProcess("podman", [...RUNTIME, ...args], { cwd: repoRoot, timeoutMs });
}

/** `podman run --rm` of the image with the given options, then cvisor's arguments. */
function inImage(options: string[], args: string[]): Promise<CliResult> {
  return podman(["run", "--rm", "--network", "host", ...LIMITS, ...options, IMAGE, ...args]);
}

before(async () => {
  if (skip) return;
  work = mkdtempSync(join(tempRoot(), "cvisor-container-"));
  const has = spawnSync("podman", ["image", "exists", BASE]);
  if (has.status !== 0) {
    const base = await runProcess(
      "bash",
      [join(repoRoot, "test/container/base-image.sh"), BASE, work],
      {
        timeoutMs: 10 * 60_000,
      },
    );
    assert.equal(base.code, 0, show(base));
  }
  imagesBefore = images();
});

after(async () => {
  if (skip) return;
  await podman(["volume", "rm", "--force", `${VOLUME}-0`, `${VOLUME}-1`]);
  // The image and every layer the build cached (a GB per run otherwise); the base image stays
  // for the next run, as a registry's would.
  const made = images().filter((id) => !imagesBefore.includes(id));
  await podman(["rmi", "--force", IMAGE, ...made]);
  if (work) rmSync(work, { recursive: true, force: true });
});

test(
  "the Dockerfile builds: a runtime image with the CLI as its entrypoint",
  { skip, timeout: 20 * 60_000 },
  async (t) => {
    const build = await podman(
      ["build", "--network", "host", ...LIMITS, "-t", IMAGE, "-f", "Dockerfile", "."],
      20 * 60_000,
    );
    assert.equal(build.code, 0, show(build));
    const inspect = await podman(["image", "inspect", IMAGE, "--format", "{{json .Config}}"]);
    assert.equal(inspect.code, 0, show(inspect));
    const config = JSON.parse(inspect.out) as { Entrypoint: string[]; User: string };
    assert.deepEqual(config.Entrypoint, ["cvisor"]);
    assert.equal(config.User, "cvisor");
    // No compiler and no sources in the runtime image: only Node and the installed package.
    const r = await inImage(["--entrypoint", "sh"], ["-c", "command -v gcc make cc; ls /src 2>&1"]);
    assert.match(r.out, /No such file or directory/);
    assert.doesNotMatch(r.out, /gcc|make/);
    const size = await podman(["image", "inspect", IMAGE, "--format", "{{.Size}}"]);
    t.diagnostic(`image size: ${size.out.trim()} bytes`);
  },
);

for (const [who, user] of [
  ["the image's user", []],
  ["root", ["--user", "root"]],
] as const) {
  test(
    `inside the container as ${who}: doctor, a run, a named sandbox kept in a volume, caches`,
    { skip, timeout: 5 * 60_000 },
    async () => {
      const doctor = await inImage([...user], ["doctor"]);
      assert.equal(doctor.code, 0, show(doctor));

      const native = spawnSync("uname", ["-srvmo"], { encoding: "utf8" });
      const uname = await inImage([...user], ["--", "uname", "-srvmo"]);
      assert.equal(uname.code, 0, show(uname));
      assert.equal(uname.out, native.stdout);

      // What the guest does lands in the sandbox, never in the container's own files.
      const script = [
        "set -e",
        `cvisor -- sh -c 'rm "$HOME/.bashrc" && echo x > "$HOME/made-here"'`,
        'test -e "$HOME/.bashrc"',
        'test ! -e "$HOME/made-here"',
        "cvisor cache save --format zstd deps /etc/apt",
        "cvisor cache restore deps /tmp/restored",
        "diff -r /etc/apt /tmp/restored && echo restored",
      ].join("\n");
      const inside = await inImage([...user, "--entrypoint", "sh"], ["-c", script]);
      assert.equal(inside.code, 0, show(inside));
      assert.match(inside.out, /^restored$/m);

      // A named sandbox outlives the container in a volume mounted on the state directory.
      const state = user.length ? "/root/.local/share/cvisor" : "/home/cvisor/.local/share/cvisor";
      const mount = ["-v", `${VOLUME}-${user.length}:${state}`];
      let r = await inImage(
        [...user, ...mount],
        ["--sandbox", "work", "--", "sh", "-c", "echo kept > /tmp/note"],
      );
      assert.equal(r.code, 0, show(r));
      r = await inImage([...user, ...mount], ["--sandbox", "work", "--", "cat", "/tmp/note"]);
      assert.equal(r.code, 0, show(r));
      assert.equal(r.out, "kept\n");
      await podman(["volume", "rm", "--force", `${VOLUME}-${user.length}`]);
    },
  );
}

test(
  "a Docker-like seccomp profile: doctor says what to add, and --cap-add SYS_PTRACE is enough",
  { skip, timeout: 5 * 60_000 },
  async () => {
    // podman's profile, with pidfd_getfd allowed only with CAP_SYS_PTRACE, as Docker's has it.
    const profile = JSON.parse(readFileSync("/usr/share/containers/seccomp.json", "utf8")) as {
      syscalls: { names: string[]; action: string; includes?: { caps?: string[] } }[];
    };
    for (const rule of profile.syscalls) {
      if (rule.action === "SCMP_ACT_ALLOW" && !rule.includes?.caps)
        rule.names = rule.names.filter((name) => name !== "pidfd_getfd");
    }
    profile.syscalls.push({
      names: ["pidfd_getfd"],
      action: "SCMP_ACT_ALLOW",
      includes: { caps: ["CAP_SYS_PTRACE"] },
    });
    const file = join(work, "docker-like-seccomp.json");
    writeFileSync(file, JSON.stringify(profile));
    const opt = ["--security-opt", `seccomp=${file}`];

    const doctor = await inImage(opt, ["doctor"]);
    assert.equal(doctor.code, 1, show(doctor));
    assert.match(doctor.out, /pidfd_getfd[^\n]*unavailable/);
    assert.match(doctor.out, /--cap-add SYS_PTRACE/);
    const refused = await inImage(opt, ["--", "true"]);
    assert.equal(refused.code, 125, show(refused));

    const r = await inImage([...opt, "--cap-add", "SYS_PTRACE"], ["--", "sh", "-c", "echo ran"]);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, "ran\n");
  },
);
