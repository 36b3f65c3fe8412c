# The sandbox-remediator image: one program, two roles (`operator` in the Deployment, `agent` in the
# DaemonSet). Build: make image. test/integration/image.test.ts rebuilds the last stage without a container
# engine by following this file's WORKDIR and COPY lines, so a path that drifts fails that test.

# Compile: every dependency, dev ones included (TypeScript).
FROM node:20-bookworm AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npx --no-install tsc -p tsconfig.build.json

# Production dependencies only, installed in a stage of their own so npm's cache stays out of the image.
# No install scripts: nothing we depend on at run time needs one.
FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

FROM node:20-bookworm-slim
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
# NODE_OPTIONS: Node 20 refuses it there.
ENTRYPOINT ["node", "--optimize-for-size", "dist/src/main.js"]
