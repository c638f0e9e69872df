// Where `diff`, `export` and `cp` get a named sandbox's read-only snapshot layers from.
//
// STUB, the one place to wire at merge: the store records each sandbox's chain of layers
// (issue 4); until it does, a sandbox has none. Return the absolute layer tree directories
// (`$CVISOR_HOME/layers/<id>/tree`), top first: the layer right under the upper comes first.

/** The read-only layers under a named sandbox's upper, top first (absolute tree directories). */
export function sandboxLowers(sandbox: { dir: string }): string[] {
  void sandbox;
  return [];
}
