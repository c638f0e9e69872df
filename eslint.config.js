// ESLint flat config: typescript-eslint's recommended rules on all TypeScript, type-aware
// promise checks on all of it, no import cycles, dependencies one way (CLI -> library -> store
// and core), and the rule that only src/paths.ts may read the home/temp dirs.
import js from "@eslint/js";
import { defineConfig } from "eslint/config";
import tseslint from "typescript-eslint";
import globals from "globals";
import noImportCycle from "./scripts/eslint/no-import-cycle.js";

const homeOrTmp = "^(homedir|tmpdir)$";
const onlyPaths = "Only src/paths.ts reads the home and temp directories; use its helpers.";
const noHomeOrTmp = ["os", "node:os"].map((name) => ({
  name,
  importNames: ["homedir", "tmpdir"],
  message: onlyPaths,
}));

export default defineConfig(
  { ignores: ["dist/", "node_modules/", "native/"] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    plugins: { cvisor: { rules: { "no-import-cycle": noImportCycle } } },
    rules: {
      "cvisor/no-import-cycle": "error",
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_" },
      ],
      "no-restricted-imports": ["error", ...noHomeOrTmp],
      "no-restricted-syntax": [
        "error",
        // os.homedir(), os.tmpdir(), and the same through any alias of the module.
        { selector: `CallExpression[callee.property.name=/${homeOrTmp}/]`, message: onlyPaths },
      ],
    },
  },
  {
    // Dependencies run one way: CLI -> library -> store and core. Nothing below the CLI imports it.
    files: [
      "src/core/**/*.ts",
      "src/sandbox/**/*.ts",
      "src/index.ts",
      "cache/**/*.ts",
      "snapshots/**/*.ts",
    ],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          paths: noHomeOrTmp,
          patterns: [
            { group: ["**/cli/*"], message: "The CLI sits on top: nothing below it imports it." },
          ],
        },
      ],
    },
  },
  {
    // The store is the bottom layer: it knows the disk format, nothing that uses it.
    files: ["src/store/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          paths: noHomeOrTmp,
          patterns: [
            {
              group: ["**/cli/*", "**/sandbox/*", "**/snapshots/*", "**/cache/*"],
              message: "src/store/ is the bottom layer: it imports only src/core/ and itself.",
            },
          ],
        },
      ],
    },
  },
  {
    // Test helpers rethrow with their own context (compiler output) on purpose.
    files: ["test/**/*.ts"],
    rules: { "preserve-caught-error": "off" },
  },
  {
    // The bin is CommonJS (it must start fast): `import x = require()` is TypeScript's form there.
    files: ["src/cli/bin.cts"],
    rules: { "@typescript-eslint/no-require-imports": "off" },
  },
  {
    files: ["src/paths.ts"],
    rules: { "no-restricted-imports": "off", "no-restricted-syntax": "off" },
  },
  {
    files: ["**/*.ts", "**/*.tsx", "**/*.cts"],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": [
        "error",
        {
          // node:test runs the tests it is given; their promises are its own to await.
          allowForKnownSafeCalls: [
            {
              from: "package",
              package: "node:test",
              name: [
                "test",
                "it",
                "describe",
                "suite",
                "before",
                "after",
                "beforeEach",
                "afterEach",
              ],
            },
            { from: "file", path: "test/helpers/guard.ts", name: "gtest" },
          ],
        },
      ],
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/await-thenable": "error",
    },
  },
);
