# Sluice container image: a build stage that compiles the TypeScript and the native addons against
# the image's own Node 22, and a slim runtime stage that runs as the unprivileged `node` user.
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 -v $PWD/sluice.yaml:/etc/sluice/sluice.yaml:ro sluice
# See docs/deploy.md.

FROM node:22-bookworm AS build
WORKDIR /app
# Toolchain for node-gyp: better-sqlite3 is compiled here from source against this Node's headers
# (npm_config_nodedir), never fetched prebuilt. uWebSockets.js ships its linux-x64/arm64 binaries in
# the npm package itself.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
ENV npm_config_build_from_source=true \
    npm_config_nodedir=/usr/local
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund \
 && npm rebuild better-sqlite3
COPY tsconfig.json ./
COPY bin ./bin
COPY config ./config
COPY proxy ./proxy
COPY loadtest ./loadtest
COPY test ./test
RUN npx tsc -p . \
 && node dist/config/schema-precompile.js \
 && npm prune --omit=dev --no-audit --no-fund \
 && node -e "require('better-sqlite3')(':memory:').close()"

FROM node:22-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json /app/package-lock.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/bin ./bin
COPY --from=build /app/config ./config
COPY --from=build /app/proxy/admin/status-page.html ./proxy/admin/status-page.html
COPY --from=build /app/loadtest/profiles ./loadtest/profiles
# Writable only where Sluice writes: the SQLite job store and access-log files, when configured.
RUN mkdir -p /var/lib/sluice && chown node:node /var/lib/sluice
USER node
EXPOSE 8080 9901
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=2s --start-period=10s \
  CMD ["node", "-e", "fetch('http://127.0.0.1:9901/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "/app/bin/sluice.js"]
CMD ["serve", "--config", "/etc/sluice/sluice.yaml"]
