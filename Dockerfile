# cvisor in a container: `docker build -t cvisor .`, then
#   docker run --rm --cap-add SYS_PTRACE cvisor -- uname -a
#   docker run --rm -it --cap-add SYS_PTRACE cvisor        (a shell in a sandbox)
# README.md's "Docker" section says why Docker needs that option (podman does not) and how to
# keep named sandboxes in a volume.

# Build: the npm package exactly as `npm pack` makes it (its core prebuilt for this image),
# installed into /opt/cvisor with a compiler at hand, so zstd-napi's module is built too.
FROM node:20-bookworm-slim AS build
RUN apt-get update \
  && apt-get install -y --no-install-recommends gcc g++ libc6-dev make musl-tools python3 \
  && rm -rf /var/lib/apt/lists/*
# node-gyp builds zstd-napi against the image's own Node headers, not a download.
ENV npm_config_nodedir=/usr/local
WORKDIR /src
COPY package.json package-lock.json ./
# The dependencies first (a layer of their own); their install scripts run below, once the
# sources are in (the package's own need them).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY . .
RUN mkdir /tmp/pkg \
  && npm rebuild --no-audit --no-fund \
  && npm pack --pack-destination /tmp/pkg \
  && npm install -g --prefix /opt/cvisor --no-audit --no-fund /tmp/pkg/cvisor-*.tgz

# Runtime: Node and the installed CLI; no compiler, no sources, no dev dependencies.
FROM node:20-bookworm-slim
COPY --from=build /opt/cvisor /opt/cvisor
ENV PATH=/opt/cvisor/bin:$PATH
RUN useradd --create-home --shell /bin/bash cvisor
USER cvisor
WORKDIR /home/cvisor
# Named sandboxes, snapshots and caches live in ~/.local/share/cvisor: mount a volume there to
# keep them. Without a command, cvisor starts a shell in an ephemeral sandbox.
ENTRYPOINT ["cvisor"]
