#!/usr/bin/env bash
# Quick start: two echo backends and sluice in standalone mode on loopback, a few requests
# that show the routing, then sluice keeps serving until Ctrl-C (or exits at once with
# QUICKSTART_EXIT=1). Edit the files in manifests/ while it runs: changes apply within a second.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/examples/quickstart"
cd "$root"

cargo build -q -p sluice -p sluice-echo
bin="${CARGO_TARGET_DIR:-$root/target}/debug"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$bin/sluice-echo" --listen 127.0.0.1:9001 --service web --pod web-1 >/dev/null & pids+=($!)
"$bin/sluice-echo" --listen 127.0.0.1:9002 --service api --pod api-1 >/dev/null & pids+=($!)
"$bin/sluice" serve --manifests "$here/manifests" \
  --http-addr 127.0.0.1:8080 --https-addr 127.0.0.1:8443 --admin-addr 127.0.0.1:10254 & pids+=($!)

for _ in $(seq 1 100); do
  curl -fs http://127.0.0.1:10254/readyz >/dev/null 2>&1 && break
  sleep 0.1
done

show() { # host path: prints the status and which backend answered (or where it redirects)
  local body code svc tail loc
  body=$(curl -s -w '\n%{http_code} %{redirect_url}' -H "Host: $1" "http://127.0.0.1:8080$2")
  tail=${body##*$'\n'}
  code=${tail%% *}
  loc=${tail#* }
  svc=$(printf '%s' "$body" | sed -n 's/.*"service":"\([^"]*\)","pod":"\([^"]*\)".*/service \1, pod \2/p')
  [ -n "$loc" ] && svc="redirect to $loc"
  printf '%-20s %-14s %s  %s\n' "$1" "$2" "$code" "${svc:-sluice error page}"
}
echo
printf '%-20s %-14s %s\n' host path "status  answered by"
show shop.localtest /
show shop.localtest /api/orders
show shop.localtest /apiary
show x.apps.localtest /status
show x.apps.localtest /status/
show nowhere.localtest /
show store.gw.localtest /shoes
show store.gw.localtest /old/shoes
echo
echo "sluice is serving on http://127.0.0.1:8080 (admin: http://127.0.0.1:10254/metrics)."
[ "${QUICKSTART_EXIT:-0}" = 1 ] && exit 0
echo "Edit $here/manifests/*.yaml and try again; Ctrl-C stops everything."
wait
