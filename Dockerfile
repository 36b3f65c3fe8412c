# The sandbox-remediator image: one program, two roles (`operator` in the Deployment, `agent` in the
# DaemonSet). Build: make image, with docker, podman or buildah. Without a container engine, make image builds the
# same image from Debian's archive (hack/image/build.sh: Debian's Node.js of the same major, the same /app, user and
# entrypoint); test/integration/image.test.ts checks that the two agree, and runs that image's own Node on its files.
# Node.js 24: the LTS in support (Node 20 reached its end of life in April 2026).

# The two build stages run on the builder's own platform: what they make (dist/'s JavaScript, node_modules with no
# native module and no install script) is the same on every architecture, so a multi-arch build (the release
# workflow: linux/amd64 and linux/arm64) emulates nothing; only the final stage, which runs nothing, is per platform.

# Compile: every dependency, dev ones included (TypeScript).
FROM --platform=$BUILDPLATFORM node:24-trixie AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npx --no-install tsc -p tsconfig.build.json

# Production dependencies only, installed in a stage of their own so npm's cache stays out of the image.
# No install scripts: nothing we depend on at run time needs one.
FROM --platform=$BUILDPLATFORM node:24-trixie-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

FROM node:24-trixie-slim
ENV NODE_ENV=production
WORKDIR /app
# package.json says "type": "module", which dist/'s ESM needs; its directory is where the operator looks for
# crds/ (--install-crds).
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY crds ./crds
# Numeric, so runAsNonRoot can verify it without an /etc/passwd entry. Everything above is owned by root and
# only read: the pods run with a read-only root filesystem.
USER 65532:65532
# --optimize-for-size: V8 collects garbage sooner, and the first pass over 1,000 nodes peaks under 200 MB (make
# bench-scale measures the operator started this way; docs/adr/0026-pipelined-passes.md). A node option, not
# NODE_OPTIONS: Node refuses it there.
ENTRYPOINT ["node", "--optimize-for-size", "dist/src/main.js"]
