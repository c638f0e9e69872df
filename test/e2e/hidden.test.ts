// Credentials and cvisor's own state are kept from guests: a guest cannot read ~/.ssh, ~/.aws,
// ~/.netrc, ... or the state directory, by any path; --expose gives one back, --hide adds one.
// (Listing and stat still show that they exist; hiding their names comes with the overlay.)
import assert from "node:assert/strict";
import { mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { Sandbox } from "../../src/index.js";
import { gtest } from "../helpers/guard.js";
import { cvisor, runCli, show, uniqueToken } from "../helpers/repo.js";

interface FakeHome {
  home: string;
  state: string;
  secrets: Record<string, string>;
}

/** A home of the test's own, with a secret in each credential file and in the state dir. */
function fakeHome(scratch: string): FakeHome {
  const home = path.join(scratch, "home");
  const state = path.join(home, ".local", "share", "cvisor");
  const files = [".ssh/id_ed25519", ".aws/credentials", ".netrc", ".config/gcloud/token", ".npmrc"];
  const secrets: Record<string, string> = {};
  for (const rel of files) {
    const file = path.join(home, rel);
    mkdirSync(path.dirname(file), { recursive: true });
    secrets[rel] = uniqueToken("cvisor-hidden-secret");
    writeFileSync(file, `${secrets[rel]}\n`);
  }
  mkdirSync(state, { recursive: true });
  secrets.state = uniqueToken("cvisor-hidden-state");
  writeFileSync(path.join(state, "meta.json"), `${secrets.state}\n`);
  writeFileSync(path.join(home, "notes.txt"), "visible\n");
  return { home, state, secrets };
}

const env = (h: FakeHome): Record<string, string> => ({ HOME: h.home });

function assertNoSecret(text: string, h: FakeHome, what: string): void {
  for (const [rel, secret] of Object.entries(h.secrets))
    assert.ok(!text.includes(secret), `${what}: ${rel} was read:\n${text}`);
}

gtest("credentials in $HOME and the state directory cannot be read; the rest can", async (fx) => {
  const h = fakeHome(fx.scratch);
  const script = [
    'cat "$HOME/.ssh/id_ed25519" "$HOME/.aws/credentials" "$HOME/.netrc" 2>&1',
    'cat "$HOME/.config/gcloud/token" "$HOME/.npmrc" "$HOME/.local/share/cvisor/meta.json" 2>&1',
    // Other spellings of the same files
    'cat /proc/self/root"$HOME/.ssh/id_ed25519" 2>&1',
    'cd "$HOME/.ssh" 2>&1 && cat ./id_ed25519 2>&1',
    'cat "$HOME/.aws/../.aws/credentials" 2>&1',
    'cat "$HOME/notes.txt"',
  ].join("; ");
  const r = await cvisor([], ["sh", "-c", script], { extraEnv: env(h) });
  assertNoSecret(r.out + r.err, h, "cat");
  assert.match(r.out, /Permission denied|No such file/, show(r));
  assert.match(r.out, /^visible$/m, show(r));
});

gtest("--expose gives a hidden path back; --hide hides one more", async (fx) => {
  const h = fakeHome(fx.scratch);
  const exposed = await cvisor(
    ["--expose", path.join(h.home, ".ssh")],
    ["cat", path.join(h.home, ".ssh", "id_ed25519")],
    { extraEnv: env(h) },
  );
  assert.equal(exposed.code, 0, show(exposed));
  assert.equal(exposed.out.trim(), h.secrets[".ssh/id_ed25519"], show(exposed));

  const hidden = await cvisor(["--hide", fx.p("sub")], ["cat", fx.p("sub", "nested.txt")], {
    extraEnv: env(h),
  });
  assert.notEqual(hidden.code, 0, show(hidden));
  assert.equal(hidden.out, "", show(hidden));
  const beside = await cvisor(["--hide", fx.p("sub")], ["cat", fx.p("hello.txt")], {
    extraEnv: env(h),
  });
  assert.equal(beside.code, 0, show(beside));
});

gtest("the library hides the same paths, with hide and expose options", async (fx) => {
  const h = fakeHome(fx.scratch);
  const saved = process.env.HOME;
  process.env.HOME = h.home;
  try {
    const key = path.join(h.home, ".ssh", "id_ed25519");
    const denied = await new Sandbox().run(["cat", key]);
    assert.notEqual(denied.exitCode, 0);
    assertNoSecret(denied.stdout + denied.stderr, h, "library");
    const allowed = await new Sandbox({ expose: [path.join(h.home, ".ssh")] }).run(["cat", key]);
    assert.equal(allowed.stdout.trim(), h.secrets[".ssh/id_ed25519"]);
    const extra = await new Sandbox().run(["cat", fx.p("hello.txt")], { hide: [fx.root] });
    assert.notEqual(extra.exitCode, 0);
    assert.equal(extra.stdout, "");
  } finally {
    process.env.HOME = saved;
  }
});

gtest("a command in a hidden directory of PATH is passed over for the next one", async (fx) => {
  const dirs = ["hidden-bin", "visible-bin"].map((name) => {
    const dir = path.join(fx.scratch, name);
    mkdirSync(dir);
    writeFileSync(path.join(dir, "tool"), `#!/bin/sh\necho ${name}\n`, { mode: 0o755 });
    return dir;
  });
  const extraEnv = { PATH: `${dirs.join(":")}:/usr/bin:/bin` };
  const plain = await cvisor([], ["tool"], { extraEnv });
  assert.equal(plain.out, "hidden-bin\n", show(plain));
  const hidden = await cvisor(["--hide", dirs[0] ?? ""], ["tool"], { extraEnv });
  assert.equal(hidden.code, 0, show(hidden));
  assert.equal(hidden.out, "visible-bin\n", show(hidden));
});

// A directory the guest makes where a hidden one lies is a new directory, not the hidden one:
// an open of a changed directory hands out its host twin (so that dev/ino stay the same), and
// the hidden twin must never be that, nor show through its fd, its listing or its inode.
gtest(
  "a directory made where a hidden one lies: its fd, listing and inode are not the hidden one's",
  async (fx) => {
    const h = fakeHome(fx.scratch);
    const probe = [
      "import json, os",
      "d = os.path.join(os.environ['HOME'], '.ssh')",
      "os.makedirs(d, exist_ok=True)",
      "open(os.path.join(d, 'mine'), 'w').write('x')",
      "fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)",
      "print('list ' + json.dumps([sorted(os.listdir(fd)), sorted(os.listdir(d))]))",
      "print('ino', os.fstat(fd).st_ino, os.stat(d).st_ino)",
      "try:",
      "    print(open('id_ed25519', opener=lambda p, f: os.open(p, f, dir_fd=fd)).read())",
      "except OSError as e:",
      "    print('read', e.strerror)",
    ].join("\n");
    const r = await cvisor([], ["python3", "-c", probe], { extraEnv: env(h) });
    assert.equal(r.code, 0, show(r));
    assertNoSecret(r.out + r.err, h, "through a directory made over ~/.ssh");
    const [byFd, byPath] = JSON.parse(/^list (.*)$/m.exec(r.out)?.[1] ?? "[]") as string[][];
    assert.deepEqual(byFd, byPath, show(r));
    assert.ok(byFd !== undefined && !byFd.includes("id_ed25519"), show(r));
    const ino = /^ino (\d+) (\d+)$/m.exec(r.out);
    assert.ok(ino, show(r));
    assert.equal(ino[1], ino[2], show(r));
    assert.notEqual(Number(ino[1]), statSync(path.join(h.home, ".ssh")).ino, show(r));
    assert.match(r.out, /^read No such file or directory$/m, show(r));
  },
);

// Hiding takes the host's names out of listings, never the sandbox's own: what the guest makes
// where a hidden path lies is listed, and counts (rmdir sees it), also once it is in a snapshot.
gtest(
  "what the guest makes where a hidden path lies is listed as its own, before and after a snapshot",
  async (fx) => {
    const h = fakeHome(fx.scratch);
    const make = [
      "import os",
      "d = os.path.join(os.environ['HOME'], '.ssh')",
      "os.mkdir(d)",
      "open(os.path.join(d, 'mine'), 'w').write('x')",
    ].join("\n");
    const look = [
      "import json, os",
      "home = os.environ['HOME']",
      "d = os.path.join(home, '.ssh')",
      "fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)",
      "print('list ' + json.dumps([sorted(os.listdir(d)), sorted(os.listdir(fd)), '.ssh' in os.listdir(home)]))",
      "try:",
      "    os.rmdir(d)",
      "    print('rmdir done')",
      "except OSError as e:",
      "    print('rmdir', e.strerror)",
    ].join("\n");
    const check = (r: Awaited<ReturnType<typeof cvisor>>, what: string): void => {
      assert.equal(r.code, 0, `${what}: ${show(r)}`);
      assertNoSecret(r.out + r.err, h, what);
      const listed = JSON.parse(/^list (.*)$/m.exec(r.out)?.[1] ?? "null") as unknown;
      assert.deepEqual(listed, [["mine"], ["mine"], true], `${what}: ${show(r)}`);
      assert.match(r.out, /^rmdir Directory not empty$/m, `${what}: ${show(r)}`);
    };
    check(
      await cvisor([], ["python3", "-c", `${make}\n${look}`], { extraEnv: env(h) }),
      "ephemeral",
    );

    const named = ["--sandbox", "hid"];
    const made = await cvisor(named, ["python3", "-c", make], { extraEnv: env(h) });
    assert.equal(made.code, 0, show(made));
    check(await cvisor(named, ["python3", "-c", look], { extraEnv: env(h) }), "named");
    const snap = await runCli([...named, "snapshot"], { extraEnv: env(h) });
    assert.equal(snap.code, 0, show(snap));
    check(
      await cvisor(named, ["python3", "-c", look], { extraEnv: env(h) }),
      "from a snapshot layer",
    );
    assert.deepEqual(readdirSync(path.join(h.home, ".ssh")), ["id_ed25519"], "the host's ~/.ssh");
  },
);
