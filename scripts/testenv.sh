#!/usr/bin/env bash
# Installs what sluice's tests need on a fresh Debian machine and builds the test control
# plane (etcd from Debian; kube-apiserver and kube-controller-manager v1.20.2 from Debian's
# `kubernetes` source package), cached so that later runs take seconds.
#
#   scripts/testenv.sh            install + build (idempotent), print the bin dir
#   scripts/testenv.sh --print    print the bin dir only (fails if not built)
#
# Cache: $SLUICE_TESTENV_CACHE, else $XDG_CACHE_HOME/sluice, else ~/.cache/sluice.
set -euo pipefail

CACHE=${SLUICE_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
KVER=1.20.2
# The suffix names the source patches below; a new patch means a new directory, so
# caches built without it are rebuilt rather than reused.
BIN=$CACHE/kube-$KVER-crd1/bin
log() { printf 'testenv: %s\n' "$*" >&2; }

if [ "${1:-}" = "--print" ]; then
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] || { log "not built; run scripts/testenv.sh"; exit 1; }
  echo "$BIN"; exit 0
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# 1. Debian packages. apt-get update only when something is missing.
#    libcap2-bin (setcap), util-linux (setpriv) and curl: the unprivileged-bind test runs
#    sluice as the DaemonSet does; kubectl (`kubectl kustomize`): the deploy/ overlays test;
#    chromium (headless): the dashboard is tested in a real browser;
#    golang-github-modern-go-reflect2-dev: a kube-apiserver that serves custom resources
#    (Gateway API), see the patches below.
need=()
for p in golang-go etcd-server iproute2 openssl ca-certificates libcap2-bin util-linux curl chromium \
  golang-github-modern-go-reflect2-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
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
# Debian's etcd-server may start a system etcd where init runs; tests start their own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
  as_root systemctl disable --now etcd >/dev/null 2>&1 || true
fi

# 2. The control plane binaries.
if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ]; then
  log "control plane cached in $BIN"
  echo "$BIN"; exit 0
fi

mkdir -p "$CACHE/src"
cd "$CACHE/src"
if ! ls kubernetes_*.orig.tar.gz >/dev/null 2>&1; then
  # The machine lists only binary packages: add the source twin of the same archive.
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    log "adding deb-src entries"
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] || continue
      grep -q '^Types: deb$' "$f" || continue
      sed 's/^Types: deb$/Types: deb-src/' "$f" | as_root tee "${f%.sources}-src.sources" >/dev/null
    done
    if [ -f /etc/apt/sources.list ]; then
      grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' | as_root tee /etc/apt/sources.list.d/sluice-src.list >/dev/null || true
    fi
    as_root apt-get update -qq
  fi
  log "downloading Debian's kubernetes source package"
  apt-get source --download-only kubernetes >/dev/null
fi
tarball=$(ls kubernetes_*.orig.tar.gz | head -n1)
if [ ! -d "kubernetes-$KVER" ]; then
  log "unpacking $tarball"
  tar xzf "$tarball"
fi

export GOPATH=$CACHE/gopath GOCACHE=$CACHE/gocache GO111MODULE=off CGO_ENABLED=0 GOFLAGS=
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$CACHE/src/kubernetes-$KVER" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"

if [ ! -f pkg/generated/openapi/zz_generated.openapi.go ]; then
  log "building openapi-gen"
  go build -o bin/openapi-gen ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  pkgs=$(grep -rl --include='*.go' '^// +k8s:openapi-gen=true' pkg staging/src vendor \
    | xargs -n1 dirname | sort -u | grep -v 'code-generator/_examples' \
    | sed -e 's#^pkg/#k8s.io/kubernetes/pkg/#' -e 's#^staging/src/##' -e 's#^vendor/##' \
    | paste -sd, -)
  log "generating OpenAPI definitions for $(echo "$pkgs" | tr , '\n' | wc -l) packages"
  bin/openapi-gen -i "$pkgs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h hack/boilerplate/boilerplate.generatego.txt --report-filename /dev/null
fi

# Two fixes so that custom resources work when v1.20.2 is built with today's Go:
# 1. The vendored reflect2 v1.0.1 predates Go 1.18's map iterator and crashes on the first
#    write of any custom resource; use Debian's v1.0.2.
# 2. Since Go 1.19, reflect.DeepEqual(Zero(T), ValueOf(v)) holds for "", so the vendored
#    OpenAPI validator takes every empty string in a custom resource for null; test for nil
#    only, as the released v1.20.2 effectively did under Go 1.15.
r2=vendor/github.com/modern-go/reflect2
if [ ! -f "$r2/.sluice-v1.0.2" ]; then
  log "replacing vendored reflect2 with Debian's v1.0.2"
  src=/usr/share/gocode/src/github.com/modern-go/reflect2
  [ -f "$src/reflect2.go" ] || { log "missing $src (golang-github-modern-go-reflect2-dev)"; exit 1; }
  rm -f "$r2"/*.go "$r2"/*.s
  for f in "$src"/*.go "$src"/*.s; do
    case "$f" in *_test.go) continue ;; esac
    cp "$f" "$r2/"
  done
  touch "$r2/.sluice-v1.0.2"
fi
for f in vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go vendor/github.com/go-openapi/validate/type.go; do
  if grep -q 'if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {' "$f"; then
    sed -i 's/if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {/if data == nil {/' "$f"
  elif ! grep -q 'if data == nil {' "$f"; then
    log "$f: the null check to patch was not found"; exit 1
  fi
done

V=k8s.io/kubernetes/vendor/k8s.io/component-base/version
LDF="-X $V.gitMajor=1 -X $V.gitMinor=20 -X $V.gitVersion=v$KVER -X $V.gitTreeState=clean"
mkdir -p "$BIN.tmp"
for cmd in kube-apiserver kube-controller-manager; do
  log "building $cmd (a cold build takes minutes)"
  go build -ldflags "$LDF" -o "$BIN.tmp/$cmd" "./cmd/$cmd"
done
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
log "control plane built in $BIN"
echo "$BIN"
