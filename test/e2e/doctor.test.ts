// `cvisor doctor` on this machine: every feature tried for real, [✓]/[!]/[✗] lines, exit 0
// because sandboxes run here (the rest of this suite proves it); and the --json form.
import assert from "node:assert/strict";
import { gtest } from "../helpers/guard.js";
import { runCli, show } from "../helpers/repo.js";

gtest("cvisor doctor reports ok on this machine (exit 0, no [✗])", async () => {
  const r = await runCli(["doctor"], { extraEnv: { NO_COLOR: "1" } });
  assert.equal(r.code, 0, show(r));
  const lines = r.out.split("\n").filter((l) => l.trim() !== "");
  const marked = lines.filter((l) => /^\s*\[(✓|!|✗)\]/.test(l));
  assert.ok(marked.length >= 5, `want a [✓]/[!]/[✗] line per feature\n${show(r)}`);
  assert.ok(marked.filter((l) => l.includes("[✓]")).length >= 5, show(r));
  assert.deepEqual(
    lines.filter((l) => l.includes("[✗]")),
    [],
    `a [✗] line while sandboxes do run here\n${show(r)}`,
  );
  assert.ok(!(r.out + r.err).includes("\u001b["), `no colour without a TTY\n${show(r)}`);
  assert.doesNotMatch(r.err, /^\s+at /m, show(r));
  for (const feature of [/seccomp/i, /landlock/i, /pidfd/i, /helper/i]) {
    assert.match(r.out, feature, `doctor should check ${String(feature)}\n${show(r)}`);
  }
});

gtest("cvisor doctor --json is one JSON document and says ok", async () => {
  const r = await runCli(["doctor", "--json"]);
  assert.equal(r.code, 0, show(r));
  let doc: unknown;
  try {
    doc = JSON.parse(r.out);
  } catch {
    assert.fail(`stdout is not one JSON document\n${show(r)}`);
  }
  assert.ok(typeof doc === "object" && doc !== null, show(r));
  const text = JSON.stringify(doc);
  assert.match(text, /seccomp/i, show(r));
  assert.match(text, /landlock/i, show(r));
  const o = doc as { ok?: unknown; checks?: { id: string; purpose?: unknown }[] };
  assert.equal(o.ok, true, show(r));
  // Each check says what it is for (issue 13).
  assert.ok(Array.isArray(o.checks) && o.checks.length >= 10, show(r));
  for (const c of o.checks) {
    assert.ok(typeof c.purpose === "string" && c.purpose.length > 10, `${c.id} has no purpose`);
  }
  const cgroups = o.checks.filter((x) => x.id.startsWith("cgroup"));
  assert.deepEqual(
    cgroups.map((c) => c.id),
    ["cgroup_v2", "cgroup_v1"],
  );
  assert.match(String(cgroups[0]?.purpose), /--memory, --pids-limit and --cpus/);
  assert.match(String(cgroups[1]?.purpose), /v1 controller/);
  // Per limit: what enforces it for this user here, or why nothing does.
  const limits = o.checks.find((x) => x.id === "limits") as { detail?: string } | undefined;
  const mechanism = /--memory: (cgroup v[12] \(|the supervisor samples)/;
  assert.match(String(limits?.detail), mechanism, show(r));
});

gtest("cvisor doctor says under each check what it is for", async () => {
  const r = await runCli(["doctor"], { extraEnv: { NO_COLOR: "1" } });
  const lines = r.out.split("\n");
  const at = lines.findIndex((l) => l.includes("seccomp user notification"));
  assert.match(lines[at + 1] ?? "", /^ {4}\S.*system call/, show(r));
  const cg = lines.findIndex((l) => l.includes("cgroup v2"));
  assert.match(lines[cg + 1] ?? "", /each run gets one cgroup v2/, show(r));
});
