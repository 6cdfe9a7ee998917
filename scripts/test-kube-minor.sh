#!/usr/bin/env bash
# Runs the Kubernetes-facing tests (every test that starts a control plane) against another
# Kubernetes release than the default, built and cached by scripts/testenv.sh.
#
#   scripts/test-kube-minor.sh [VERSION]      default 1.34.4; any k8s.io/kubernetes release
#                                             the Go module proxy serves
set -euo pipefail
cd "$(dirname "$0")/.."
export SLUICE_KUBE_VERSION=${1:-${SLUICE_KUBE_VERSION:-1.34.4}}
t0=$(date +%s)
bash scripts/testenv.sh >/dev/null
echo "test-kube-minor: control plane v${SLUICE_KUBE_VERSION#v} ready in $(( $(date +%s) - t0 ))s"
# The binaries the tests run as pods and processes.
cargo build -p sluice -p sluice-echo --bins
cargo test -p sluice-testenv --tests
cargo test -p sluice-informer \
  --test control_plane --test control_plane_disruptive --test cache_contents --test examples \
  --test leader_election
cargo test -p sluice-controller \
  --test apiserver_restart --test churn --test controller_flags --test deployment \
  --test deploy_install --test drain --test gateway_api --test gateway_api_late \
  --test ingress_controller --test migrate --test sources
cargo test -p sluice-ingress-manager --test ingress_manager
cargo test -p sluice --test deploy_manifests
echo "test-kube-minor: all passed against v${SLUICE_KUBE_VERSION#v}, $(( $(date +%s) - t0 ))s in all"
