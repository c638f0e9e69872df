// cvisor(1) is made from the command definitions: every option of every command is on the page
// as man renders it, and the page the build wrote (man/cvisor.1, installed by the package) is
// the one the code makes now.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import type { Command, Option } from "commander";
import { manPage } from "../../src/cli/man-page.js";
import { commandTree } from "../../src/cli/parse.js";
import { repoRoot, which } from "../helpers/repo.js";

/** Every option's long flag (else its short one), command by command. */
function allFlags(c: Command): string[] {
  const own = (c.options as readonly Option[]).map((o) => o.long ?? o.short ?? "");
  return [...own, ...c.commands.flatMap(allFlags)];
}

test(
  "the man page has every option of every command, as man renders it",
  { skip: which("man") ? false : "man is not installed" },
  () => {
    const r = spawnSync("man", ["-l", "-"], {
      input: manPage(),
      encoding: "utf8",
      env: { ...process.env, MANWIDTH: "200", MAN_KEEP_FORMATTING: "0", PAGER: "cat" },
    });
    assert.equal(r.status, 0, r.stderr);
    // Bold and underline come as overstrikes (X\bX); man may hyphenate with U+2010.
    const backspace = String.fromCharCode(8);
    const text = r.stdout
      .split("")
      .filter((ch, i, all) => ch !== backspace && all[i + 1] !== backspace)
      .join("")
      .replace(/\u2010/g, "-");
    for (const section of [
      "NAME",
      "SYNOPSIS",
      "OPTIONS",
      "COMMANDS",
      "EXIT STATUS",
      "ENVIRONMENT",
    ]) {
      assert.match(text, new RegExp(`^${section}$`, "m"), section);
    }
    const flags = allFlags(commandTree());
    assert.ok(flags.length > 30, `${flags.length} flags`);
    for (const flag of flags) assert.ok(text.includes(flag), `${flag} is on the page`);
    for (const cmd of ["cvisor cache save", "cvisor snapshots", "cvisor completion"]) {
      assert.ok(text.includes(cmd), cmd);
    }
    assert.doesNotMatch(r.stderr, /warning/i);
  },
);

test("the page the build wrote is the page the code makes", () => {
  assert.equal(readFileSync(join(repoRoot, "man", "cvisor.1"), "utf8"), manPage());
});
