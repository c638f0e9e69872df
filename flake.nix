{
  description = "cvisor: run programs you don't fully trust in a userspace sandbox (seccomp user notification and Landlock)";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs =
    { self, nixpkgs }:
    let
      # The sandbox core is written for x86-64 Linux (its syscall table and handlers).
      systems = [ "x86_64-linux" ];
      forEachSystem = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      manifest = builtins.fromJSON (builtins.readFile ./package.json);
    in
    {
      packages = forEachSystem (
        pkgs:
        let
          inherit (pkgs) lib;
          # What the build reads, and nothing a checkout may hold besides (node_modules, dist,
          # native/build, tests): a change elsewhere does not rebuild the package.
          src = lib.fileset.toSource {
            root = ./.;
            fileset = lib.fileset.unions [
              ./package.json
              ./package-lock.json
              ./.npmrc
              ./tsconfig.json
              ./README.md
              ./SECURITY.md
              ./docs
              ./src
              ./cache
              ./snapshots
              ./examples
              ./scripts
              ./native/Makefile
              ./native/include
              ./native/src
              ./native/tools
            ];
          };
          cvisor = pkgs.buildNpmPackage {
            pname = manifest.name;
            inherit (manifest) version;
            inherit src;
            nodejs = pkgs.nodejs_20;
            # Every dependency is fetched by its address and sha512 in package-lock.json, so the
            # lockfile is the one pin (no separate npmDepsHash to keep in step with it).
            npmDeps = pkgs.importNpmLock { npmRoot = src; };
            npmConfigHook = pkgs.importNpmLock.npmConfigHook;
            # python3: node-gyp builds zstd-napi's module. glibc.static: the sandbox's init
            # (cvisor-helper) is a static binary.
            nativeBuildInputs = [
              pkgs.python3
              pkgs.installShellFiles
            ];
            buildInputs = [ pkgs.glibc.static ];
            # `npm run build` (the C core, tsc, the CLI bundle, the man page), then the core is
            # put where the npm package keeps it (native/prebuilt/, in package.json's files).
            npmBuildScript = "build";
            postBuild = ''
              node scripts/pack-prebuilt.mjs
            '';
            postInstall = ''
              installManPage man/cvisor.1
              installShellCompletion --cmd cvisor \
                --bash <($out/bin/cvisor completion bash) \
                --zsh <($out/bin/cvisor completion zsh) \
                --fish <($out/bin/cvisor completion fish)
            '';
            meta = {
              inherit (manifest) description;
              mainProgram = "cvisor";
              platforms = systems;
            };
          };
        in
        {
          inherit cvisor;
          default = cvisor;
        }
      );

      apps = forEachSystem (pkgs: {
        default = {
          type = "app";
          program = "${self.packages.${pkgs.stdenv.hostPlatform.system}.cvisor}/bin/cvisor";
        };
      });

      devShells = forEachSystem (pkgs: {
        default = pkgs.mkShell {
          packages = [
            pkgs.nodejs_20
            pkgs.gcc
            pkgs.gnumake
            pkgs.musl
            pkgs.python3
            pkgs.glibc.static
          ];
        };
      });
    };
}
