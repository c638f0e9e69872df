// An allow-list sandbox on the library's onSyscall hook: a policy file names the syscalls a
// program may make (of those watched) and the path prefixes it may touch; every other call is
// denied, and the denials are listed at the end. Paths are judged as the sandbox resolves them
// (`/usr/../root/x` is /root/x; a symlink counts where it points), not as the guest wrote them.
//
//   node dist/examples/allowlist.js POLICY.json -- CMD [ARGS...]
//
// POLICY.json: { "syscalls": ["openat", "execve"], "paths": ["/usr/", "/lib/", "/etc/"] }
import { readFileSync } from "node:fs";
import { allow, deny, Sandbox } from "cvisor";

const WATCHED = [
  "openat",
  "execve",
  "unlinkat",
  "mkdir",
  "mkdirat",
  "renameat2",
  "connect",
  "bind",
];

const [policyFile, dashes, ...argv] = process.argv.slice(2);
if (policyFile === undefined || dashes !== "--" || argv.length === 0) {
  console.error("usage: allowlist POLICY.json -- CMD [ARGS...]");
  process.exit(2);
}
const policy = JSON.parse(readFileSync(policyFile, "utf8")) as {
  syscalls: string[];
  paths: string[];
};
const denied = new Map<string, number>();

const sb = new Sandbox({
  onSyscall: {
    syscalls: WATCHED,
    handler: (c) => {
      const bad = !policy.syscalls.includes(c.name)
        ? c.name
        : c.paths
            .map((written, i) => c.resolved[i] ?? written)
            .find((p) => !policy.paths.some((prefix) => p.startsWith(prefix)));
      if (bad === undefined) return allow;
      const what = bad === c.name ? c.name : `${c.name} ${bad}`;
      denied.set(what, (denied.get(what) ?? 0) + 1);
      return deny(bad === c.name ? "EPERM" : "EACCES");
    },
  },
});
const r = await sb.run(argv, { stdout: "inherit", stderr: "inherit" });
for (const [what, count] of denied)
  console.error(`denied: ${what}${count > 1 ? ` (${count}x)` : ""}`);
process.exitCode = r.exitCode;
