# syntax=docker/dockerfile:1
# Agent trust appliance. Build: docker build -t agent-trust-service .
# Run:   docker run -p 8080:8080 -p 8000:8000 -v service-data:/var/lib/service agent-trust-service
# deploy/compose.yaml runs it with PostgreSQL, Redis, an OpenTelemetry collector and Prometheus.

ARG NODE_IMAGE=node:20-bookworm-slim

# Build stage: dev dependencies and the TypeScript compiler. Only src/ is compiled (tests and
# benchmarks are not shipped); rootDir stays ".", so the output lands in dist/src as the CLI expects.
# The operator console (console/, bundled by esbuild into dist/console) is built here too.
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
RUN echo '{"extends":"./tsconfig.json","include":["src/**/*.ts"]}' > tsconfig.build.json \
 && npx tsc -p tsconfig.build.json
COPY console ./console
COPY scripts/build-console.mjs ./scripts/
RUN node scripts/build-console.mjs

# Production dependencies only, installed from the lock file (no compiler, no test tools).
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

# Runtime stage. src/core/paths.ts finds the project root by walking up to package.json, so /app must hold
# package.json, schemas/, policies/ (the Rego module served in bundles) and src/db/migrations/*.sql
# (read by src/db/migrate.ts) next to dist/src.
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    SERVICE_DATA_DIR=/var/lib/service \
    PORT=8080 \
    SERVICE_GATEWAY_PORT=8000
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json package-lock.json ./
COPY --from=build /app/dist/src ./dist/src
COPY --from=build /app/dist/console/index.html ./dist/console/
COPY --from=build /app/dist/console/assets ./dist/console/assets
COPY src/db/migrations ./src/db/migrations
COPY schemas ./schemas
COPY policies ./policies
COPY proto ./proto
# The image's own "node" user (uid 1000) owns only the data directory; the code stays root-owned and
# read-only to the process.
RUN mkdir -p /var/lib/service && chown node:node /var/lib/service && chmod 0700 /var/lib/service
USER node
# 8080: admin plane (and /healthz, /readyz, /metrics; the ops listener of `agent-trust gateway`); 8000: gateway.
EXPOSE 8080 8000
# Authority key file, bootstrap key file and, without DATABASE_URL, the embedded database.
VOLUME ["/var/lib/service"]
# Liveness only (/readyz also checks the database); slim images have no curl, node has fetch.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# --max-semi-space-size: src/node-flags.ts says why.
ENTRYPOINT ["node", "--max-semi-space-size=64", "dist/src/cli/index.js"]
CMD ["serve"]
