#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v4/cmd/helm, the version pinned in tools/helm/go.mod) once into
# the test cache and prints its path; later runs only print it. Rebuilt when tools/helm
# changes. The chart tests (crates/sluice/tests/helm_chart.rs, crates/controller/tests/
# helm_install.rs) run the binary this prints.
#
#   scripts/helm.sh            build if needed, print the path of helm
#   scripts/helm.sh ARGS...    build if needed, then run helm ARGS...
#
# Cache: $SLUICE_TESTENV_CACHE, else $XDG_CACHE_HOME/sluice, else ~/.cache/sluice (the same
# as scripts/testenv.sh; the Go build and module caches are shared with it).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${SLUICE_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
export GOCACHE=$CACHE/gocache GOMODCACHE=$CACHE/gomod GOPATH=$CACHE/gopath CGO_ENABLED=0 \
  GO111MODULE=on GOWORK=off GOFLAGS=-mod=readonly
log() { printf 'helm: %s\n' "$*" >&2; }
command -v go >/dev/null 2>&1 || { log "go is needed: run bash scripts/testenv.sh first"; exit 1; }

VERSION=$(cd tools/helm && go list -m -f '{{.Version}}' helm.sh/helm/v4)
BIN=$CACHE/helm-$VERSION/bin
stamp=$(cat tools/helm/go.mod tools/helm/go.sum tools/helm/*.go | sha256sum | cut -d' ' -f1)
if [ "$(cat "$BIN/.stamp" 2>/dev/null)" != "$stamp" ] || [ ! -x "$BIN/helm" ]; then
  t0=$(date +%s)
  log "building helm $VERSION (cold: a few minutes on 2 cores)"
  mkdir -p "$BIN"
  V=helm.sh/helm/v4/internal/version
  (cd tools/helm && go build -trimpath -ldflags "-s -w -X $V.version=$VERSION" \
    -o "$BIN/helm.tmp" helm.sh/helm/v4/cmd/helm)
  mv "$BIN/helm.tmp" "$BIN/helm"
  echo "$stamp" >"$BIN/.stamp"
  log "built helm $VERSION in $(( $(date +%s) - t0 ))s"
fi
if [ $# -gt 0 ]; then
  exec "$BIN/helm" "$@"
fi
echo "$BIN/helm"
