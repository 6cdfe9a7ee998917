#!/usr/bin/env bash
# Route propagation at scale (issue #31), after howardjohn/gateway-api-bench Part 2: on a
# fresh test control plane (kube-apiserver + etcd from scripts/testenv.sh), the release
# `sluice controller` as a process of its own, steady bounded load on a stable route
# (2,000 requests/s by default) while routes are created, updated and deleted at a fixed
# rate. Per change: API write
# acknowledged -> first correct answer through sluice. Prints p50/p99/max propagation,
# stable-route errors, controller RSS, CPU seconds per 1,000 changes and cold start.
#
#   bench/propagation.sh                                  100 and 3,000 routes, both kinds
#   SIZES="100 3000 10000" bench/propagation.sh           up to 10,000 routes
#   KINDS=httproute SERVICES=5000 ENDPOINTS=50000 CHANGES=300 RATE=10 LOAD=2 LOAD_RATE=2000 bench/propagation.sh
#   LOAD_RATE=0 bench/propagation.sh                     a saturating load (next request when answered)
#
# The knobs are documented in crates/controller/benches/propagation.rs (the driver).
# Uses $CARGO_TARGET_DIR when set.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "[propagation] $*" >&2; }

"$ROOT/scripts/testenv.sh" >/dev/null
cd "$ROOT"
log "building the release sluice binary (the one measured), the echo backends and the driver"
# The driver (load and probes) and the echo pods (found next to it) are optimised builds
# too: they share the machine with sluice and the control plane, and dev builds of them
# took more CPU than sluice itself.
cargo build --release -p sluice --bin sluice
cargo build --release -p sluice-echo
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
log "running the driver"
exec cargo bench -p sluice-controller --bench propagation -- \
    --sluice "$TARGET/release/sluice" "$@"
