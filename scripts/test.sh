#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what the tests need (Debian packages, the test
# control plane and helm, cached), checks formatting and lints, runs every test and the Gateway API
# conformance suite, and fails if any test left a process or network namespace behind.
set -euo pipefail
cd "$(dirname "$0")/.."

t0=$(date +%s)
bash scripts/testenv.sh >/dev/null
# helm (pinned in tools/helm/go.mod), for the chart tests: built once into the same cache.
bash scripts/helm.sh >/dev/null
echo "test: environment ready in $(( $(date +%s) - t0 ))s"

# CI starts from a fresh clone: keep compiled dependencies in the user cache between runs.
if [ -n "${CI:-}" ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
  export CARGO_TARGET_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/sluice/target"
  # Every CI build starts from a fresh checkout: incremental state would only pile up.
  export CARGO_INCREMENTAL=0
  # Line tables are enough for a test's backtrace; full debug info makes the cached target
  # several times larger (about 35 GB) and every link slower.
  export CARGO_PROFILE_DEV_DEBUG=line-tables-only CARGO_PROFILE_TEST_DEBUG=line-tables-only
fi

cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace

# The Gateway API conformance suite, GATEWAY-HTTP, -GRPC, -TCP, -TLS and -UDP with the features sluice claims (under a
# minute warm); the report goes to the target dir, not into the checkout.
bash scripts/conformance.sh --report "${CARGO_TARGET_DIR:-target}/conformance/report.yaml"

left=""
for name in etcd kube-apiserver kube-controller-manager kube-scheduler sluice-echo echo-basic \
  dns-standin conformance.test; do
  # Names longer than 15 characters are cut in /proc/PID/comm: match the executable path.
  pids=$(pgrep -f "(^|/)$name( |$)" | tr '\n' ' ' || true)
  [ -n "$pids" ] && left="$left $name($pids)"
done
netns=$(ip netns list 2>/dev/null | awk '$1 ~ /^sl-/ {print $1}' | tr '\n' ' ')
if [ -n "$left" ] || [ -n "$netns" ]; then
  echo "test: FAILED teardown: processes left:${left:- none}; network namespaces left: ${netns:-none}" >&2
  exit 1
fi
echo "test: all passed, nothing left behind, $(( $(date +%s) - t0 ))s in all"
