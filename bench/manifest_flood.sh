#!/usr/bin/env bash
# Does a huge manifest file hurt traffic? sluice in standalone mode routes one host to one
# echo backend on loopback; wrk measures latency twice: a baseline run, and a run during
# which a 100 MB file (valid YAML: one long list) is written straight into the manifest
# directory. The file is refused by its size (--max-manifest-bytes, 16 MiB by default)
# without being read, but while it is still being written the scanner may see it under the
# limit and parse what is there; either way that work runs on the control plane's thread,
# not on a proxy worker. Prints p50 / p99 / max and requests/s of both runs, and whether
# the big file was refused. One command: bench/manifest_flood.sh
#
# Environment knobs (defaults in brackets):
#   DURATION [10s]     length of each wrk run
#   CONNS [10]         wrk connections
#   WORKERS [1]        proxy worker threads (1: a current-thread runtime, the case where
#                      control-plane work on the proxy's runtime would stall every request)
#   FLOOD_MB [100]     size of the big file
#   FLOOD_AT [3]       seconds into the second run when the big file is written
#   LIMIT [16MiB]      --max-manifest-bytes (e.g. 1GiB: the big file is parsed, on the
#                      control thread, to see what the separate runtime alone buys)
#   SLUICE_BIN, ECHO_BIN  prebuilt binaries (default: built here with cargo --release);
#                      a sluice without --max-manifest-bytes is run without it, for an A/B
#   PORT_BASE [18080]  HTTP port; admin +1, HTTPS +2, backend +3 (all on 127.0.0.1)
set -euo pipefail

DURATION=${DURATION:-10s}
CONNS=${CONNS:-10}
WORKERS=${WORKERS:-1}
FLOOD_MB=${FLOOD_MB:-100}
FLOOD_AT=${FLOOD_AT:-3}
LIMIT=${LIMIT:-16MiB}
PORT_BASE=${PORT_BASE:-18080}
HTTP_PORT=$PORT_BASE
ADMIN_PORT=$((PORT_BASE + 1))
HTTPS_PORT=$((PORT_BASE + 2))
ECHO_PORT=$((PORT_BASE + 3))
HOST=bench.localtest

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d -t sluice-flood.XXXXXX)
PIDS=()

cleanup() {
    local pid
    # Only the processes this script started.
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "[flood] $*" >&2; }

if ! command -v wrk >/dev/null; then
    log "wrk not found; installing it (Debian package wrk)"
    if [ "$(id -u)" = 0 ]; then apt-get install -y -q wrk >&2; else sudo apt-get install -y -q wrk >&2; fi
fi

if [ -z "${SLUICE_BIN:-}" ] || [ -z "${ECHO_BIN:-}" ]; then
    log "building release sluice and sluice-echo"
    (cd "$ROOT" && cargo build --release -q -p sluice -p sluice-echo)
    release="${CARGO_TARGET_DIR:-$ROOT/target}/release"
    SLUICE_BIN=${SLUICE_BIN:-$release/sluice}
    ECHO_BIN=${ECHO_BIN:-$release/sluice-echo}
fi

# --- the world: one backend, one Ingress ---------------------------------------------------
MANIFESTS="$TMP/manifests"
mkdir -p "$MANIFESTS"
cat >"$MANIFESTS/app.yaml" <<EOF
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: sluice, annotations: {ingressclass.kubernetes.io/is-default-class: "true"}}
spec: {controller: sluice.dev/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: web}
subsets: [{addresses: [{ip: 127.0.0.1}], ports: [{name: http, port: $ECHO_PORT}]}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  rules:
  - host: $HOST
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
EOF

"$ECHO_BIN" --listen "127.0.0.1:$ECHO_PORT" --service web --pod web-1 >/dev/null 2>&1 &
PIDS+=($!)

limit_flag=()
if "$SLUICE_BIN" serve --help | grep -q -- --max-manifest-bytes; then
    limit_flag=(--max-manifest-bytes "$LIMIT")
else
    log "this sluice has no --max-manifest-bytes: running it without a limit"
fi
"$SLUICE_BIN" --log info serve --manifests "$MANIFESTS" "${limit_flag[@]}" --workers "$WORKERS" \
    --http-addr "127.0.0.1:$HTTP_PORT" --https-addr "127.0.0.1:$HTTPS_PORT" \
    --admin-addr "127.0.0.1:$ADMIN_PORT" 2>"$TMP/sluice.log" &
PIDS+=($!)

ready=""
for _ in $(seq 1 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $HOST" "http://127.0.0.1:$HTTP_PORT/" || true)
    if [ "$code" = 200 ]; then ready=1; break; fi
    sleep 0.1
done
if [ -z "$ready" ]; then
    log "sluice did not route $HOST within 10s; its log:"
    cat "$TMP/sluice.log" >&2
    exit 1
fi

# --- runs ------------------------------------------------------------------------------------
run_wrk() { # output file
    # A long --timeout: wrk leaves requests past its timeout (2s by default) out of the
    # latency figures, which would hide exactly the stalls this looks for.
    wrk -t1 -c"$CONNS" -d"$DURATION" --timeout 30s --latency -H "Host: $HOST" \
        "http://127.0.0.1:$HTTP_PORT/" >"$1"
}

# "p50 p99 max req/s non-2xx socket-errors" from wrk's output (times as wrk prints them,
# e.g. 85us, 1.20ms).
summary() {
    awk '
        /^ +Latency / && !max { max = $4 }
        /^ +50%/ { p50 = $2 }
        /^ +99%/ { p99 = $2 }
        /^Requests\/sec:/ { rps = $2 }
        /Non-2xx or 3xx responses:/ { bad = $NF }
        /Socket errors:/ { errs = $4 + $6 + $8 + $10 }
        END { printf "%s %s %s %s %s %s\n", p50, p99, max, rps, bad + 0, errs + 0 }
    ' "$1"
}

log "baseline run ($DURATION, $CONNS connections, $WORKERS proxy worker(s))"
run_wrk "$TMP/baseline.txt"

log "flood run: ${FLOOD_MB} MB written into the manifest directory ${FLOOD_AT}s in"
run_wrk "$TMP/flood.txt" &
wrk_pid=$!
PIDS+=("$wrk_pid")
sleep "$FLOOD_AT"
started=$(date +%s%N)
# One long YAML list, written in place (not renamed in), so partial sizes are visible too.
# (`yes` dies of SIGPIPE when `head` has enough: not a failure.)
{ yes -- '- junk-junk-junk-junk-junk-junk-junk-junk-junk-junk-junk-junk-junk-junk-junk' |
    head -c "$((FLOOD_MB * 1000 * 1000))" >"$MANIFESTS/big.yaml"; } || true
wrote_ms=$((($(date +%s%N) - started) / 1000000))
wait "$wrk_pid"

# Routed still, after the flood?
after=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $HOST" "http://127.0.0.1:$HTTP_PORT/" || true)
sleep 1 # one more poll, so a refusal of the final size is in the log

read -r b50 b99 bmax brps bbad berr < <(summary "$TMP/baseline.txt")
read -r f50 f99 fmax frps fbad ferr < <(summary "$TMP/flood.txt")
echo
fmt='%-22s %10s %10s %10s %12s %8s %8s\n'
printf "$fmt" run p50 p99 max "req/s" non-2xx errors
printf "$fmt" baseline "$b50" "$b99" "$bmax" "$brps" "$bbad" "$berr"
printf "$fmt" "with ${FLOOD_MB} MB file" "$f50" "$f99" "$fmax" "$frps" "$fbad" "$ferr"
echo
echo "big file: $(stat -c %s "$MANIFESTS/big.yaml") bytes, written in ${wrote_ms} ms; request after the flood: HTTP $after"
refused=$(grep -c -- 'big.yaml: file is [0-9]* bytes, over --max-manifest-bytes' "$TMP/sluice.log" || true)
parsed=$(grep 'big.yaml' "$TMP/sluice.log" | grep -vc -- 'over --max-manifest-bytes' || true)
if [ "$refused" -gt 0 ]; then
    echo "refused: yes ($refused log line(s): once per size seen while it was written); other log lines about it (partial reads parsed): $parsed"
    grep -o -- 'reason=.*big.yaml: file is [0-9]* bytes, over --max-manifest-bytes.*' "$TMP/sluice.log" | sed 's/^/  /'
else
    echo "refused: NO; log lines about it: $parsed"
fi
grep 'big.yaml' "$TMP/sluice.log" | grep -v -- 'over --max-manifest-bytes' | cut -c1-240 | sed 's/^/  /' || true
