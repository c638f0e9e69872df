// `cvisor ui` honours NO_COLOR (https://no-color.org): the same screen, without colour codes.
// Colours are forced on first (a test's stdout is no terminal), before Ink loads.
import assert from "node:assert/strict";
import { test } from "node:test";

process.env.FORCE_COLOR = "1";
const { render } = await import("ink-testing-library");
const { Details } = await import("../../src/tui/view.js");

const ESC = String.fromCharCode(27);
const COLOR = new RegExp(`${ESC}\\[3[0-9]m`);
const plain = (s: string): string => s.replace(new RegExp(`${ESC}\\[[0-9;]*m`, "g"), "");

test("NO_COLOR: the same screen without colour codes", () => {
  const now = new Date().toISOString();
  const sandbox = {
    name: "b",
    sizeBytes: 1024,
    layers: 1,
    base: null,
    created: now,
    lastRun: null,
    running: 0,
  };
  const draw = (): string =>
    render(
      <Details sandbox={sandbox} tree={[]} changes={[{ kind: "D", path: "/y" }]} width={60} />,
    ).lastFrame() ?? "";
  delete process.env.NO_COLOR;
  const colored = draw();
  assert.match(colored, COLOR, "colours are on without NO_COLOR");
  process.env.NO_COLOR = "1";
  const bare = draw();
  assert.doesNotMatch(bare, COLOR, "no colour with NO_COLOR");
  assert.equal(plain(bare), plain(colored), "the same text");
});
