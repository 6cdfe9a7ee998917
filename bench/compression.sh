#!/usr/bin/env bash
# Response compression: sluice (--gzip --gzip-level N) against nginx (gzip on;
# gzip_comp_level N) in front of the same backend, on loopback, with the same wrk load.
# One command: bench/compression.sh
#
# The backend is nginx serving one fixed JSON body (100 KiB, generated, the same every run);
# clients send `Accept-Encoding: gzip`. Printed per peer: requests, the proxy's CPU seconds
# (user + system, from /proc: the figure a noisy neighbour disturbs least) per MiB of
# uncompressed body it compressed, and the compression ratio (body bytes / compressed
# bytes, from one response read with curl); then sluice / nginx for both.
#
# Environment knobs (defaults in brackets):
#   LEVEL [1]        gzip level for both (ingress-nginx's gzip-level default is 1)
#   DURATION [5s]    length of one wrk run
#   ROUNDS [2]       runs per peer, alternated (sluice, nginx, nginx, sluice, ...)
#   CONNS [8]        wrk connections
#   SIZE [102400]    body size in bytes
set -euo pipefail

LEVEL=${LEVEL:-1}
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-2}
CONNS=${CONNS:-8}
SIZE=${SIZE:-102400}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d -t sluice-bench-gzip.XXXXXX)
BACKEND_PID=""
PEER_PID=""

cleanup() {
    local pid
    # Only the processes this script started and that are still running.
    for pid in $PEER_PID $BACKEND_PID; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "[bench] $*" >&2; }

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || need+=(nginx-light)
command -v curl >/dev/null || need+=(curl)
if ((${#need[@]})); then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need[@]}" >/dev/null || log "some packages could not be installed"
fi
command -v wrk >/dev/null || { log "wrk is required"; exit 1; }
command -v nginx >/dev/null || { log "nginx is required"; exit 1; }

log "building sluice (release)"
(cd "$ROOT" && cargo build --release -q -p sluice-proxy --example bench_proxy)
SLUICE_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/bench_proxy"

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
BACKEND_PORT=$(free_port)
SLUICE_HTTP=$(free_port); SLUICE_HTTPS=$(free_port); SLUICE_ADMIN=$(free_port)
NGINX_HTTP=$(free_port)

mkdir -p "$TMP/www" "$TMP/backend" "$TMP/nginx"
# A JSON array of records, like an API's answer: compressible, but not trivially.
python3 - "$SIZE" >"$TMP/www/data.json" <<'PY'
import json, random, sys
size = int(sys.argv[1])
rng = random.Random(30)
words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
items, out = [], "[]"
while len(out) < size:
    i = len(items)
    items.append({"id": i, "name": f"{rng.choice(words)}-{rng.randrange(10**6)}",
                  "tags": rng.sample(words, 3), "score": round(rng.random() * 100, 3),
                  "active": rng.random() < 0.5})
    out = json.dumps(items, separators=(",", ":"))
sys.stdout.write(out[:size - 1] + "]" if len(out) > size else out)
PY

common() {
    cat <<EOF
user root;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
EOF
}
temp_paths() {
    cat <<EOF
    client_body_temp_path $1/client_body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
EOF
}
cat >"$TMP/backend/nginx.conf" <<EOF
$(common "$TMP/backend")
worker_processes 1;
events { worker_connections 1024; }
http {
$(temp_paths "$TMP/backend")
    access_log off;
    keepalive_requests 1000000;
    default_type application/json;
    server {
        listen 127.0.0.1:$BACKEND_PORT;
        location = /data.json { root $TMP/www; }
    }
}
EOF
# nginx as ingress-nginx configures it with use-gzip: "true" and gzip-level N.
cat >"$TMP/nginx/nginx.conf" <<EOF
$(common "$TMP/nginx")
worker_processes 1;
events { worker_connections 1024; }
http {
$(temp_paths "$TMP/nginx")
    access_log off;
    keepalive_requests 1000000;
    gzip on;
    gzip_comp_level $LEVEL;
    gzip_http_version 1.1;
    gzip_min_length 256;
    gzip_types application/json;
    gzip_proxied any;
    gzip_vary on;
    upstream backend {
        server 127.0.0.1:$BACKEND_PORT;
        keepalive 16;
    }
    server {
        listen 127.0.0.1:$NGINX_HTTP;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF

wait_port() {
    local i
    for ((i = 0; i < 100; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    log "port $1 did not open"
    return 1
}

nginx -p "$TMP/backend" -c "$TMP/backend/nginx.conf" &
BACKEND_PID=$!
wait_port "$BACKEND_PORT"

start_peer() {
    case $1 in
    sluice)
        "$SLUICE_BIN" --backend "127.0.0.1:$BACKEND_PORT" --http-addr "127.0.0.1:$SLUICE_HTTP" \
            --https-addr "127.0.0.1:$SLUICE_HTTPS" --admin-addr "127.0.0.1:$SLUICE_ADMIN" \
            --workers 1 --gzip --gzip-level "$LEVEL" --gzip-types application/json \
            --drain-timeout 1s >"$TMP/sluice.log" 2>&1 &
        PEER_PID=$!
        wait_port "$SLUICE_HTTP"
        ;;
    nginx)
        nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
        PEER_PID=$!
        wait_port "$NGINX_HTTP"
        ;;
    esac
}
stop_peer() {
    kill "$PEER_PID" 2>/dev/null || true
    wait "$PEER_PID" 2>/dev/null || true
    PEER_PID=""
}
port_of() { [[ $1 == sluice ]] && echo "$SLUICE_HTTP" || echo "$NGINX_HTTP"; }

# user+system jiffies of a server and its worker processes.
ticks() {
    local pid total=0 t
    for pid in $1 $(pgrep -P "$1" 2>/dev/null); do
        t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) || continue
        total=$((total + t))
    done
    echo "$total"
}

RESULTS="$TMP/results.tsv"
: >"$RESULTS"
order=()
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then order+=(sluice nginx); else order+=(nginx sluice); fi
done
HZ=$(getconf CLK_TCK)
round=0
for peer in "${order[@]}"; do
    start_peer "$peer"
    url="http://127.0.0.1:$(port_of "$peer")/data.json"
    # The compressed size and a check that the body decodes to the original.
    curl -s -H 'Accept-Encoding: gzip' -o "$TMP/$peer.gz" -D "$TMP/$peer.head" "$url"
    grep -qi '^content-encoding: gzip' "$TMP/$peer.head" || { log "$peer did not compress"; exit 1; }
    cmp -s <(gzip -dc "$TMP/$peer.gz") "$TMP/www/data.json" || { log "$peer: body differs"; exit 1; }
    compressed=$(stat -c %s "$TMP/$peer.gz")
    c0=$(ticks "$PEER_PID")
    wrk -t 1 -c "$CONNS" -d "$DURATION" -H 'Accept-Encoding: gzip' "$url" >"$TMP/wrk.txt" 2>&1 || true
    c1=$(ticks "$PEER_PID")
    requests=$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")
    errors=$(awk '/Non-2xx or 3xx responses:/ {n += $NF} /Socket errors:/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' "$TMP/wrk.txt")
    stop_peer
    round=$((round + 1))
    awk -v p="$peer" -v r="${requests:-0}" -v c=$((c1 - c0)) -v hz="$HZ" -v size="$SIZE" \
        -v z="$compressed" -v e="$errors" 'BEGIN {
        mib = r * size / 1048576
        printf "%s\t%d\t%.4f\t%.3f\t%d\n", p, r, (mib > 0 ? c / hz / mib : 0), size / z, e }' >>"$RESULTS"
    log "$(tail -1 "$RESULTS")"
done

echo
echo "gzip level $LEVEL, body $SIZE bytes of JSON, wrk -c $CONNS -d $DURATION x $ROUNDS rounds, $(nproc) CPUs"
printf '%-8s %10s %16s %8s %7s\n' peer requests "cpu s/MiB in" ratio errors
awk -F'\t' '
    { n[$1]++; req[$1] += $2; cpu[$1] += $3; ratio[$1] = $4; err[$1] += $5 }
    END {
        for (p in n) printf "%-8s %10d %16.4f %8.2f %7d\n", p, req[p], cpu[p] / n[p], ratio[p], err[p]
        if (n["sluice"] && n["nginx"] && cpu["nginx"] > 0)
            printf "sluice/nginx: cpu per MiB %.2f, ratio %.2f\n",
                (cpu["sluice"] / n["sluice"]) / (cpu["nginx"] / n["nginx"]), ratio["sluice"] / ratio["nginx"]
    }' "$RESULTS"
