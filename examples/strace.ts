// An strace of the sandbox's calls, on the library's onSyscall hook: every call of the syscalls
// named is printed as it happens (before cvisor answers it) and allowed.
//
//   node dist/examples/strace.js openat,execve,connect -- CMD [ARGS...]
//
// Lines go to stderr, `PID NAME(ARGS)`; the command's own output is passed through.
import { allow, Sandbox, type SyscallCall } from "cvisor";

const [list, dashes, ...argv] = process.argv.slice(2);
if (list === undefined || dashes !== "--" || argv.length === 0) {
  console.error("usage: strace SYSCALL[,SYSCALL...] -- CMD [ARGS...]");
  process.exit(2);
}

/** The call's arguments as strace would show the ones cvisor decodes. */
function shown(c: SyscallCall): string {
  const parts: string[] = c.paths.map((p) => JSON.stringify(p));
  if (c.flags) parts.push(c.flags.join("|"));
  if (c.argv) parts.push(JSON.stringify(c.argv));
  if (c.address) {
    const a = c.address;
    parts.push(
      a.family === "unix"
        ? `{unix ${a.path}}`
        : a.family === "other"
          ? `{family ${a.number}}`
          : `{${a.family} ${a.address}:${a.port}}`,
    );
  }
  return parts.join(", ");
}

const sb = new Sandbox({
  onSyscall: {
    syscalls: list.split(","),
    handler: (c) => {
      process.stderr.write(`${c.pid} ${c.name}(${shown(c)})\n`);
      return allow;
    },
  },
});
const r = await sb.run(argv, { stdin: "inherit", stdout: "inherit", stderr: "inherit" });
process.exitCode = r.exitCode;
