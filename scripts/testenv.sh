#!/usr/bin/env bash
# Installs what sluice's tests need on a fresh Debian machine and builds the test control
# plane from Go modules: kube-apiserver, kube-controller-manager and kube-scheduler from
# k8s.io/kubernetes, etcd from go.etcd.io/etcd/server/v3. Binaries, the Go build cache and
# the module cache live in the cache dir, so a warm run takes seconds.
#
#   scripts/testenv.sh            install + build (idempotent), print the bin dir
#   scripts/testenv.sh --print    print the bin dir only (fails if not built)
#
# Cache: $SLUICE_TESTENV_CACHE, else $XDG_CACHE_HOME/sluice, else ~/.cache/sluice.
# Versions: SLUICE_KUBE_VERSION (default below; any k8s.io/kubernetes release the Go module
# proxy serves), SLUICE_ETCD_VERSION. The crate sluice-testenv reads the same variables.
# Go: the installed go, or GOTOOLCHAIN=goX.Y.Z to have it fetch a newer one through the proxy.
set -euo pipefail

CACHE=${SLUICE_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
# Keep in step with crates/testenv/src/binaries.rs.
KVER=${SLUICE_KUBE_VERSION:-1.37.2}
KVER=${KVER#v}
EVER=${SLUICE_ETCD_VERSION:-3.6.16}
EVER=${EVER#v}
BIN=$CACHE/kube-v$KVER/bin
EBIN=$CACHE/etcd-v$EVER/bin
log() { printf 'testenv: %s\n' "$*" >&2; }
built() {
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] &&
    [ -x "$BIN/kube-scheduler" ] && [ -x "$BIN/etcd" ]
}

if [ "${1:-}" = "--print" ]; then
  built || { log "v$KVER not built; run scripts/testenv.sh"; exit 1; }
  echo "$BIN"; exit 0
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# 1. Debian packages. apt-get update only when something is missing.
#    iproute2: pods are network namespaces on a bridge; libcap2-bin (setcap), util-linux
#    (setpriv, unshare) and curl: the unprivileged-bind test runs sluice as the DaemonSet does;
#    kubectl (`kubectl kustomize`): the deploy/ overlays test; chromium (headless): the
#    dashboard is tested in a real browser; memcached and redis-server: the global rate
#    limit's tests start their own servers (the packages' system services need not run);
#    golang-go only where no go is installed.
need=()
for p in iproute2 openssl ca-certificates libcap2-bin util-linux curl chromium memcached \
  redis-server; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
command -v go >/dev/null 2>&1 || need+=(golang-go)
if ! command -v kubectl >/dev/null 2>&1; then
  # The package `kubectl` where an apt source offers it (kustomize v5), else Debian's own
  # `kubernetes-client` (kubectl 1.20, kustomize v2.0.3): deploy/ is written for both.
  [ ${#need[@]} -gt 0 ] || as_root apt-get update -qq
  if apt-cache policy kubectl 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    need+=(kubectl)
  else
    need+=(kubernetes-client)
  fi
fi
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# 2. The control plane binaries, cached by version.
if built; then
  log "control plane v$KVER (etcd v$EVER) cached in $BIN"
  echo "$BIN"; exit 0
fi

export GOCACHE=$CACHE/gocache GOMODCACHE=$CACHE/gomod GOPATH=$CACHE/gopath CGO_ENABLED=0 \
  GOFLAGS=-mod=mod GO111MODULE=on GOWORK=off
began=$(date +%s)

# A wrapper module per version. `go install k8s.io/kubernetes/cmd/...@vX` does not work: the
# module's go.mod replaces each staging module (k8s.io/api, ...) by a directory missing from
# the module zip, so the wrapper replaces them by their releases (v0.<minor>.<patch>). The list
# is read from that go.mod because it changes between minors.
mod=$CACHE/kube-v$KVER/mod
if [ ! -f "$mod/go.sum" ]; then
  log "resolving k8s.io/kubernetes v$KVER"
  rm -rf "$mod" && mkdir -p "$mod"
  (
    cd "$mod"
    go mod init sluice.invalid/testenv-kube >/dev/null 2>&1
    kmod=$(go mod download -json "k8s.io/kubernetes@v$KVER" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [ -f "$kmod" ] || { log "k8s.io/kubernetes@v$KVER: no go.mod from the module proxy"; exit 1; }
    staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$kmod")
    [ -n "$staging" ] || { log "no staging replacements in k8s.io/kubernetes@v$KVER's go.mod"; exit 1; }
    args=(-require="k8s.io/kubernetes@v$KVER")
    for m in $staging; do args+=(-replace="$m=$m@v0.${KVER#1.}"); done
    go mod edit "${args[@]}"
    # The commands are imported by a file so that `go mod tidy` keeps what they need.
    printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n)\n' >tools.go
    go mod tidy
  )
fi
minor=${KVER#1.}; minor=${minor%%.*}
V=k8s.io/component-base/version
LDF="-s -w -X $V.gitVersion=v$KVER -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitTreeState=clean"
rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
log "building kube-apiserver, kube-controller-manager, kube-scheduler v$KVER (cold: about 10 minutes on 2 cores)"
(cd "$mod" && go build -trimpath -ldflags "$LDF" -o "$BIN.tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler)

# etcd in a module of its own: its dependency versions differ from Kubernetes'.
if [ ! -x "$EBIN/etcd" ]; then
  emod=$CACHE/etcd-v$EVER/mod
  rm -rf "$emod" "$EBIN" && mkdir -p "$emod" "$EBIN"
  log "building etcd v$EVER"
  (
    cd "$emod"
    go mod init sluice.invalid/testenv-etcd >/dev/null 2>&1
    go mod edit -require="go.etcd.io/etcd/server/v3@v$EVER"
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
    go mod tidy
    go build -trimpath -ldflags "-s -w" -o "$EBIN/etcd" go.etcd.io/etcd/server/v3
  )
fi
ln -sf "$EBIN/etcd" "$BIN.tmp/etcd"
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
log "control plane v$KVER (etcd v$EVER) built in $BIN in $(($(date +%s) - began)) s"
echo "$BIN"
