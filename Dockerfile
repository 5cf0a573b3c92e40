# syntax=docker/dockerfile:1
# Build stage: compile TypeScript with the dev dependencies.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY test ./test
COPY bench ./bench
COPY schemas ./schemas
COPY policies ./policies
RUN npx tsc -p tsconfig.json && npm prune --omit=dev

# Runtime stage: production dependencies, compiled code, SQL migrations, schemas and the Rego module
# (served in policy bundles); no compiler.
FROM node:20-bookworm-slim
ENV NODE_ENV=production SERVICE_DATA_DIR=/var/lib/service
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src
COPY --from=build /app/src/db/migrations ./src/db/migrations
COPY --from=build /app/schemas ./schemas
COPY --from=build /app/policies ./policies
RUN mkdir -p /var/lib/service && chown node:node /var/lib/service
USER node
EXPOSE 8080 8000
VOLUME ["/var/lib/service"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
ENTRYPOINT ["node", "dist/src/cli/index.js"]
CMD ["serve"]
