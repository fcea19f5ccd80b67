#!/usr/bin/env bash
# `npm run bench`: the proxy benchmark (loadtest/bench/README.md). Installs wrk, nginx and HAProxy
# with apt-get when one is missing (as root; BENCH_NO_INSTALL=1 skips that), then runs the compiled
# benchmark under timeout(1), which stops it and every process it started after MAX_SECONDS
# (default 3600). `--dry-run` and `--report FILE` install and start nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."

main=dist/loadtest/bench/bench-main.js
if [ ! -f "$main" ]; then
  echo "bench: $main is missing; run 'npm ci' (or 'npm run build') first" >&2
  exit 2
fi

for arg in "$@"; do
  case "$arg" in
    --dry-run | --report) exec node "$main" "$@" ;;
  esac
done

# Debian package of each command the benchmark runs.
declare -A package=([wrk]=wrk [nginx]=nginx-light [haproxy]=haproxy [taskset]=util-linux [timeout]=coreutils)
missing=()
for cmd in wrk nginx haproxy taskset timeout; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${package[$cmd]}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "${BENCH_NO_INSTALL:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bench: installing ${missing[*]} (apt-get)" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "bench: missing ${missing[*]}: apt-get install ${missing[*]} (the run drops targets it cannot start)" >&2
  fi
fi

exec timeout --kill-after=15 "${MAX_SECONDS:-3600}" node "$main" "$@"
