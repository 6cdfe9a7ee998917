#!/usr/bin/env bash
# sluice's informer vs client-go 1.20's, through each one's public factory API, on the same
# test API server (kube-apiserver 1.20.2 + etcd from scripts/testenv.sh).
#
# Builds two programs of the same shape (a shared informer factory, its Pod informer, start,
# wait for cache sync; print the sync time and VmHWM):
#   - sluice:    crates/informer/examples/pod_sync.rs (release build)
#   - client-go: bench/informer-go/main.go, built in GOPATH mode against the vendor tree of
#                the Kubernetes source that scripts/testenv.sh unpacked (nothing is downloaded)
# then runs crates/informer/benches/client_go.rs, which starts a control plane, creates the
# Pods and runs the two programs alternately, printing every run, medians and ratios.
#
#   bench/informer.sh               10,000 Pods, 3 rounds
#   bench/informer.sh --pods 100000 100,000 Pods
#   bench/informer.sh --rounds 5
#   bench/informer.sh --metadata    also sluice's metadata-only Pod informer
#   bench/informer.sh --steady 60 [--rate 1000]
#                                   then a steady phase per program: Pod patches at --rate/s
#                                   for 60 s after sync; RSS after it vs after sync, handler
#                                   latency p50/p99 (patch sent -> update handler called)
#
# Uses $CARGO_TARGET_DIR when set.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "[informer-bench] $*" >&2; }

PODS=10000
ROUNDS=3
EXTRA=()
while (($#)); do
    case "$1" in
        --pods) PODS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --metadata) EXTRA+=(--metadata); shift ;;
        --steady) EXTRA+=(--steady "$2"); shift 2 ;;
        --rate) EXTRA+=(--rate "$2"); shift 2 ;;
        *) log "unknown argument $1"; exit 2 ;;
    esac
done

BIN_DIR=$("$ROOT/scripts/testenv.sh")
CACHE=$(cd "$BIN_DIR/../.." && pwd)
KSRC=$CACHE/src/kubernetes-1.20.2
[ -d "$KSRC/vendor/k8s.io/client-go" ] || { log "no vendored client-go in $KSRC"; exit 1; }

TMP=$(mktemp -d -t sluice-informer-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

log "building the client-go program against $KSRC/vendor"
mkdir -p "$TMP/gopath/src/informerbench"
cp "$ROOT/bench/informer-go/main.go" "$TMP/gopath/src/informerbench/"
# GOPATH mode resolves imports through a vendor directory next to the package.
ln -s "$KSRC/vendor" "$TMP/gopath/src/informerbench/vendor"
(cd "$TMP/gopath/src/informerbench" &&
    GOPATH=$TMP/gopath GOCACHE=$CACHE/gocache GO111MODULE=off CGO_ENABLED=0 GOFLAGS= \
        go build -o "$TMP/informer-go" .)

log "building the sluice program (release)"
cd "$ROOT"
cargo build --release -q -p sluice-informer --example pod_sync
TARGET=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)

log "running: $PODS Pods, $ROUNDS rounds"
cargo bench -q -p sluice-informer --bench client_go -- \
    --sluice "$TARGET/release/examples/pod_sync" --go "$TMP/informer-go" \
    --pods "$PODS" --rounds "$ROUNDS" "${EXTRA[@]}"
