// The package version, without reading package.json on the CLI's fast path (a test keeps them equal).

/** Same as "version" in package.json. */
export const VERSION = "0.1.0";
