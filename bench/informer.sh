#!/usr/bin/env bash
# sluice's informer vs client-go's, through each one's public factory API, on the same test
# API server (kube-apiserver + etcd from scripts/testenv.sh); client-go is the release that
# matches the server (v0.<minor>.<patch> of SLUICE_KUBE_VERSION, default 1.37.2).
#
# Builds two programs of the same shape (a shared informer factory, its Pod informer, start,
# wait for cache sync; print the sync time and VmHWM); client-go runs twice per round: as it
# comes (v0.35+ streams the initial list, WatchListClient, where the server offers it: v1.34+
# does) and with -list-watch (a LIST, then a watch: `client-go-lw`):
#   - sluice:    crates/informer/examples/pod_sync.rs (release build)
#   - client-go: bench/informer-go/main.go, built in a throwaway module that requires
#                k8s.io/client-go at that release (through the Go module proxy, cached)
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
KVER=$(basename "$(dirname "$BIN_DIR")"); KVER=${KVER#kube-v}
CLIENT_GO=v0.${KVER#1.}

TMP=$(mktemp -d -t sluice-informer-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

log "building the client-go program against k8s.io/client-go $CLIENT_GO"
mkdir -p "$TMP/informerbench"
cp "$ROOT/bench/informer-go/main.go" "$TMP/informerbench/"
(cd "$TMP/informerbench" &&
    export GOCACHE=$CACHE/gocache GOMODCACHE=$CACHE/gomod GOPATH=$CACHE/gopath CGO_ENABLED=0 \
        GOFLAGS=-mod=mod GO111MODULE=on GOWORK=off &&
    go mod init sluice.invalid/informerbench >/dev/null 2>&1 &&
    go mod edit -require="k8s.io/client-go@$CLIENT_GO" -require="k8s.io/api@$CLIENT_GO" \
        -require="k8s.io/apimachinery@$CLIENT_GO" &&
    go mod tidy && go build -o "$TMP/informer-go" .)

log "building the sluice program (release)"
cd "$ROOT"
cargo build --release -q -p sluice-informer --example pod_sync
TARGET=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)

log "running: $PODS Pods, $ROUNDS rounds"
cargo bench -q -p sluice-informer --bench client_go -- \
    --sluice "$TARGET/release/examples/pod_sync" --go "$TMP/informer-go" \
    --pods "$PODS" --rounds "$ROUNDS" "${EXTRA[@]}"
