#!/usr/bin/env bash
# Runs the official Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance, the
# version in conformance/go.mod, the same as the CRDs in deploy/gateway-api), profiles
# GATEWAY-HTTP, -GRPC, -TCP, -TLS and -UDP, against sluice on the test cluster of crates/testenv, and writes the report.
#
#   scripts/conformance.sh                   the whole profile; report into conformance/reports/
#   scripts/conformance.sh --run-test NAME   one test (e.g. HTTPRouteSimpleSameNamespace);
#                                            report into the out dir
#   scripts/conformance.sh --supported-features A,B [--run-test NAME]
#                                            claim features by flag instead of reading the
#                                            GatewayClass (to try one before claiming it)
#   scripts/conformance.sh --report FILE     the report there instead
#   scripts/conformance.sh --channel standard
#                                            the standard-channel CRDs instead of the
#                                            experimental ones (their superset, the default:
#                                            HTTPRoute retry and other extended features are
#                                            experimental fields in this version)
#   scripts/conformance.sh --build           build only
#   scripts/conformance.sh ... -- FLAGS      more flags for the suite (-debug, -skip-tests=...)
#
# Builds once, cached in the test cache (see scripts/testenv.sh): the control plane, and
# from the conformance module echo-basic (the base manifests' backend image), dns-standin
# (their coredns) and the suite's test binary, under gateway-api-v<version>/bin. Then
# `sluice-conformance` (crates/testenv) starts the control plane and node agent, installs
# the standard-channel CRDs, starts `sluice controller`, runs the suite and tears all down.
# Logs: $OUT (default target/conformance): sluice.log, suite.log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

run_test="" features="" build_only="" report="" channel=experimental suite_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --run-test) run_test=$2; shift 2 ;;
    --supported-features) features=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --channel) channel=$2; shift 2 ;;
    --build) build_only=1; shift ;;
    --) shift; suite_flags=("$@"); break ;;
    *) echo "usage: scripts/conformance.sh [--run-test NAME] [--supported-features A,B] [--report FILE] [--channel standard|experimental] [--build] [-- SUITE-FLAGS]" >&2; exit 2 ;;
  esac
done
t0=$(date +%s)
log() { printf 'conformance: %s\n' "$*" >&2; }

bash scripts/testenv.sh >/dev/null

CACHE=${SLUICE_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
export GOCACHE=$CACHE/gocache GOMODCACHE=$CACHE/gomod GOPATH=$CACHE/gopath CGO_ENABLED=0 \
  GO111MODULE=on GOWORK=off GOFLAGS=-mod=readonly
# Keep in step with GATEWAY_API_VERSION in crates/testenv/src/binaries.rs.
GWAPI=$(cd conformance && go list -m -f '{{.Version}}' sigs.k8s.io/gateway-api)
# Downloaded when the module cache lacks it (the CRDs are read from there).
GWDIR=$(cd conformance && go mod download -json sigs.k8s.io/gateway-api | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
case "$channel" in standard|experimental) ;; *) log "--channel: $channel is not standard or experimental"; exit 2 ;; esac
[ -d "$GWDIR/config/crd/$channel" ] || { log "sigs.k8s.io/gateway-api $GWAPI: no $channel CRDs in the module cache"; exit 1; }
BIN=$CACHE/gateway-api-$GWAPI/bin

# Rebuilt when the module or the repo's Go sources change; otherwise nothing to do.
stamp=$(cat conformance/go.mod conformance/go.sum $(find conformance -name '*.go' | sort) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$BIN/.stamp" 2>/dev/null)" != "$stamp" ] || [ ! -x "$BIN/conformance.test" ]; then
  log "building echo-basic, dns-standin and the suite $GWAPI (cold: about 3 minutes on 2 cores)"
  mkdir -p "$BIN"
  (cd conformance &&
    go build -trimpath -o "$BIN/" sigs.k8s.io/gateway-api/conformance/echo-basic ./dns-standin &&
    go test -c -trimpath -o "$BIN/conformance.test" .)
  echo "$stamp" >"$BIN/.stamp"
fi

# As scripts/test.sh: CI starts from a fresh clone, so compiled crates live in the cache.
if [ -n "${CI:-}" ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
  export CARGO_TARGET_DIR="$CACHE/target" CARGO_INCREMENTAL=0
  export CARGO_PROFILE_DEV_DEBUG=line-tables-only CARGO_PROFILE_TEST_DEBUG=line-tables-only
fi
cargo build -q -p sluice -p sluice-testenv --bin sluice --bin sluice-conformance
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
log "built in $(( $(date +%s) - t0 ))s"
[ -z "$build_only" ] || exit 0

OUT=${OUT:-$TARGET/conformance}
mkdir -p "$OUT"
VERSION=v$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
URL=$(sed -n 's/^repository = "\(.*\)"/\1/p' Cargo.toml | head -1)
# Every Gateway gets an address of its own from this pool; all of 127.0.0.0/8 is loopback, so
# the suite's requests stay on this machine. GatewayStaticAddresses asks for one address the
# node has (loopback, outside the pool) and one it has not (TEST-NET-1: binding it fails, no
# request goes there).
POOL=${SLUICE_CONFORMANCE_POOL:-127.28.0.0/24}
args=(--suite "$BIN/conformance.test" --crds "$GWDIR/config/crd/$channel" --out "$OUT"
  --address-pool "$POOL")
if [ -n "$report" ]; then
  report=$(realpath -m "$report")
  mkdir -p "$(dirname "$report")"
elif [ -n "$run_test" ] || [ -n "$features" ]; then
  report=$OUT/report.yaml
else
  # Upstream's layout: conformance/reports/<api version>/<project>/<channel>-<version>-<mode>-report.yaml
  report=$ROOT/conformance/reports/$GWAPI/sluice/$channel-$VERSION-default-report.yaml
  mkdir -p "$(dirname "$report")"
fi
args+=(--report "$report")
[ -z "$run_test" ] || args+=(--run-test "$run_test")
flags=(-conformance-profiles=GATEWAY-HTTP,GATEWAY-GRPC,GATEWAY-TCP,GATEWAY-TLS,GATEWAY-UDP -organization=sluice -project=sluice "-url=$URL"
  "-version=$VERSION" "-contact=$URL/issues"
  "-usable-address=${SLUICE_CONFORMANCE_USABLE:-127.28.1.1}" -unusable-address=192.0.2.1)
[ -z "$features" ] || flags+=("-supported-features=$features")

set +e
"$TARGET/debug/sluice-conformance" "${args[@]}" -- "${flags[@]}" "${suite_flags[@]}" 2>&1 | tee "$OUT/suite.log"
rc=${PIPESTATUS[0]}
set -e
# The suite's own summary: one line per test (--- PASS/FAIL/SKIP of its subtests).
pass=$(grep -c '^    --- PASS: TestConformance/' "$OUT/suite.log" || true)
fail=$(grep -c '^    --- FAIL: TestConformance/' "$OUT/suite.log" || true)
skip=$(grep -c '^    --- SKIP: TestConformance/' "$OUT/suite.log" || true)
log "$pass passed, $fail failed, $skip skipped (features not claimed, or not in these profiles) in $(( $(date +%s) - t0 ))s; report: $report"
exit "$rc"
