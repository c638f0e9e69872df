// The reserved names of the layer format (docs/ARCHITECTURE.md, "The overlay"), the same as OCI
// image layers': `.wh.NAME` deletes NAME of the layers below, `.wh..wh..opq` in a directory
// hides the entries of its twins below.
export const WHITEOUT_PREFIX = ".wh.";
export const OPAQUE_MARKER = ".wh..wh..opq";
