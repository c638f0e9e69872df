// Shell completion: `cvisor completion bash|zsh|fish` prints a script that asks
// `cvisor __complete WORDS... CURRENT` for the candidates at each TAB. The answers come from the
// command definitions (commander's tree, as `--help` shows it) and the store (sandbox names,
// snapshot ids), so they never drift from the code. First line: "files" when the shell should
// also offer file names, else "-"; then one candidate per line, already filtered by CURRENT.
import type { Command, Option } from "commander";
import { readdirSync } from "node:fs";
import { isSandboxName, sandboxesDir } from "../store/sandboxes.js";
import { layerIds } from "../store/layer-meta.js";
import { commandTree } from "./parse.js";

/** Options whose value is a path: the shell offers file names there. */
const PATH_OPTIONS = new Set([
  "--workdir",
  "--hide",
  "--expose",
  "--allow-unix",
  "--trace-file",
  "--cache-dir",
]);
/** Commands whose operands are sandbox names, snapshot ids, shells, or paths. */
const OPERANDS: Record<string, "sandboxes" | "snapshots" | "shells" | "commands" | "files"> = {
  rm: "sandboxes",
  rollback: "snapshots",
  branch: "snapshots",
  snapshots: "snapshots",
  snapshot: "snapshots",
  completion: "shells",
  help: "commands",
  cp: "files",
  export: "files",
};

/** The named sandboxes in the store (none when it cannot be read). */
function sandboxNames(): string[] {
  try {
    return readdirSync(sandboxesDir()).filter(isSandboxName).sort();
  } catch {
    return [];
  }
}

/** The snapshot ids in the store (squash layers are not the user's to name). */
function snapshotIds(): string[] {
  try {
    return layerIds().filter((id) => !id.startsWith("sq~"));
  } catch {
    return [];
  }
}

function visible(c: Command): Command[] {
  return c.commands.filter((sub) => !(sub as Command & { _hidden?: boolean })._hidden);
}

function optionNames(c: Command): string[] {
  const names: string[] = [];
  for (const o of c.options as readonly Option[]) {
    if (o.long) names.push(o.long);
    if (o.short) names.push(o.short);
  }
  return names;
}

/** The option of c (or, below the root, of the root: --sandbox, --json) that word names. */
function findOption(path: readonly Command[], word: string): Option | undefined {
  for (const c of [...path].reverse()) {
    const found = (c.options as readonly Option[]).find((o) => o.long === word || o.short === word);
    if (found) return found;
  }
  return undefined;
}

/** The candidates for `current` after `words` (the words before it, `cvisor` excluded). */
export function complete(words: readonly string[], current: string): string {
  const tree = commandTree();
  const path: Command[] = [tree];
  let operands = 0;
  let valueOf: Option | undefined;
  for (const word of words) {
    if (word === "--") return answer(true, []); // the guest's command: a program and its files
    if (valueOf) {
      valueOf = undefined;
      continue;
    }
    const here = path[path.length - 1] ?? tree;
    if (word.startsWith("-")) {
      const option = findOption(path, word.split("=")[0] ?? word);
      if (option && (option.required || option.optional) && !word.includes("=")) valueOf = option;
      continue;
    }
    const sub = visible(here).find((c) => c.name() === word || c.aliases().includes(word));
    if (sub && operands === 0) path.push(sub);
    else operands++;
  }
  const here = path[path.length - 1] ?? tree;
  if (valueOf) {
    if (valueOf.long === "--sandbox") return answer(false, sandboxNames(), current);
    return answer(PATH_OPTIONS.has(valueOf.long ?? ""), [], current);
  }
  if (current.startsWith("-")) {
    const names = optionNames(here);
    if (here !== tree) names.push("--sandbox", "--help");
    return answer(false, [...new Set(names)], current);
  }
  const subs = operands === 0 ? visible(here).map((c) => c.name()) : [];
  const kind = path.length > 1 ? OPERANDS[here.name()] : undefined;
  const more =
    kind === "sandboxes"
      ? sandboxNames()
      : kind === "snapshots"
        ? snapshotIds()
        : kind === "shells"
          ? ["bash", "zsh", "fish"]
          : kind === "commands"
            ? visible(tree).map((c) => c.name())
            : [];
  return answer(kind === "files", [...subs, ...more], current);
}

function answer(files: boolean, candidates: readonly string[], current = ""): string {
  const matching = [...new Set(candidates)].filter((c) => c.startsWith(current));
  return `${files ? "files" : "-"}\n${matching.map((c) => `${c}\n`).join("")}`;
}

const BASH = `# cvisor completion for bash: eval "$(cvisor completion bash)" (e.g. in ~/.bashrc)
_cvisor() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" line first=1 files=0
  COMPREPLY=()
  while IFS= read -r line; do
    if [ "$first" = 1 ]; then first=0; [ "$line" = files ] && files=1; continue; fi
    COMPREPLY+=("$line")
  done < <(cvisor __complete "\${COMP_WORDS[@]:1:COMP_CWORD-1}" "$cur" 2>/dev/null)
  if [ "$files" = 1 ]; then
    while IFS= read -r line; do COMPREPLY+=("$line"); done < <(compgen -f -- "$cur")
  fi
}
complete -o filenames -F _cvisor cvisor
`;

const ZSH = `#compdef cvisor
# cvisor completion for zsh: eval "$(cvisor completion zsh)" after compinit, or save as _cvisor
_cvisor() {
  local -a lines
  lines=("\${(@f)$(cvisor __complete "\${(@)words[2,CURRENT-1]}" "\${words[CURRENT]}" 2>/dev/null)}")
  local files=\${lines[1]}
  shift lines
  (( \${#lines} )) && compadd -- "\${lines[@]}"
  [[ $files == files ]] && _files
  return 0
}
compdef _cvisor cvisor
`;

const FISH = `# cvisor completion for fish: cvisor completion fish | source (or save in completions/)
function __cvisor_complete
    set -l words (commandline -opc)
    set -l lines (cvisor __complete $words[2..-1] (commandline -ct) 2>/dev/null)
    if test (count $lines) -gt 1
        printf '%s\\n' $lines[2..-1]
    end
    if test "$lines[1]" = files
        __fish_complete_path (commandline -ct)
    end
end
complete -c cvisor -f -a '(__cvisor_complete)'
`;

/** The script for a shell, or undefined for one cvisor has none for. */
export function completionScript(shell: string): string | undefined {
  return { bash: BASH, zsh: ZSH, fish: FISH }[shell];
}
