#!/usr/bin/env bash
# Unary gRPC calls through sluice (backend-protocol GRPC) and through nginx (grpc_pass), both
# in front of the same tonic backend, on loopback, measured with h2load. One command:
# bench/grpc.sh
#
# The backend is crates/proxy/examples/grpc_backend.rs (a tonic server echoing the request
# message of /bench.Echo/Unary). Clients speak h2c (prior knowledge) to the proxies' plain
# ports; both proxies speak h2c to the backend over kept-alive connections. Every peer gets
# the same worker count; runs alternate between peers in ABBA order (sluice, nginx, nginx,
# sluice, …) so drift hits all alike.
#
# Every call is checked: HTTP 2xx for all of them, and the echoed message in every response
# (DATA bytes received = calls x frame size; a gRPC error has no message). grpc-status 0 in
# the trailers is checked once per peer with curl.
#
# Printed per peer: calls/s, p50, p99 (from h2load's per-request log; medians over the
# rounds), and the proxy's own CPU time per call (user + system, from /proc), which a noisy
# neighbour disturbs far less than throughput and tail latency; ratios are sluice / peer.
# Also the backend's CPU per call: nginx sends one call at a time per upstream connection,
# sluice multiplexes calls on one, and the backend shares its cores with h2load, so where
# those cores are the bottleneck calls/s reflects the backend's cost as well as the proxy's.
#
# Environment knobs (defaults in brackets):
#   WORKERS [1]        proxy worker threads / processes, the same for every peer
#   DURATION [5s]      length of one h2load run
#   ROUNDS [4]         runs per peer (alternated); the table shows medians
#   CONNS [10]         h2load connections (clients)
#   STREAMS [10]       concurrent calls per connection (h2load -m)
#   H2LOAD_THREADS [1] h2load threads
#   BACKEND_THREADS [1] tonic runtime threads of the backend
#   PIN [auto]         "auto": with >= 2 cores the proxy under test runs on the last core and
#                      h2load + backend on the others (taskset); "off": no pinning
#   PEERS ["sluice nginx"]
set -euo pipefail

WORKERS=${WORKERS:-1}
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-4}
CONNS=${CONNS:-10}
STREAMS=${STREAMS:-10}
H2LOAD_THREADS=${H2LOAD_THREADS:-1}
BACKEND_THREADS=${BACKEND_THREADS:-1}
PIN=${PIN:-auto}
PEERS=${PEERS:-"sluice nginx"}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
TMP=$(mktemp -d -t sluice-grpc-bench.XXXXXX)
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

# --- tools -------------------------------------------------------------------------------
need=()
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v nginx >/dev/null || need+=(nginx-light)
command -v curl >/dev/null || need+=(curl)
if ((${#need[@]})); then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need[@]}" >/dev/null || log "some packages could not be installed"
fi
command -v h2load >/dev/null || { log "h2load (nghttp2-client) is required"; exit 1; }
if [[ $PEERS == *nginx* ]] && ! command -v nginx >/dev/null; then
    log "nginx is required"; exit 1
fi

log "building sluice and the gRPC backend (release)"
(cd "$ROOT" && cargo build --release -q -p sluice-proxy --example bench_proxy --example grpc_backend)
SLUICE_BIN="$TARGET_DIR/release/examples/bench_proxy"
BACKEND_BIN="$TARGET_DIR/release/examples/grpc_backend"

# --- CPU placement -----------------------------------------------------------------------
CORES=$(nproc)
PROXY_CPUS=""
LOAD_CPUS=""
ON_PROXY_CPUS=()
ON_LOAD_CPUS=()
if [[ $PIN == auto && $CORES -ge 2 ]] && command -v taskset >/dev/null; then
    PROXY_CPUS=$((CORES - 1))
    LOAD_CPUS="0-$((CORES - 2))"
    # Command prefixes (not functions): a backgrounded simple command keeps its own PID
    # through taskset's exec, so $! is the server itself and `kill` reaches it.
    ON_PROXY_CPUS=(taskset -c "$PROXY_CPUS")
    ON_LOAD_CPUS=(taskset -c "$LOAD_CPUS")
fi

# --- ports, files ------------------------------------------------------------------------
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
BACKEND_PORT=$(free_port)
SLUICE_HTTP=$(free_port); SLUICE_HTTPS=$(free_port); SLUICE_ADMIN=$(free_port)
NGINX_HTTP=$(free_port)
METHOD=/bench.Echo/Unary

# One unary call's body: the 5-byte gRPC frame header (not compressed, 4-byte big-endian
# length) and the protobuf message { text (field 1, string) = "hello sluice" }.
MESSAGE='\x0a\x0chello sluice'
printf '\x00\x00\x00\x00\x0e'"$MESSAGE" >"$TMP/call.bin"
FRAME_BYTES=$(wc -c <"$TMP/call.bin")
((FRAME_BYTES == 19)) || { log "call body is $FRAME_BYTES bytes, expected 19"; exit 1; }

mkdir -p "$TMP/nginx"
# nginx's upstream keep-alive pool: nginx sends one gRPC call per upstream connection at a
# time, so the pool holds as many idle connections as there are calls in flight; fewer
# would make it open and close connections under this load, which a deployment would tune
# away.
NGINX_KEEPALIVE=$((CONNS * STREAMS > 64 ? CONNS * STREAMS : 64))

# nginx as the gRPC proxy, configured the way ingress-nginx does for backend-protocol GRPC:
# h2c listener, grpc_pass to a kept-alive upstream, the X-Forwarded-* headers sluice sets.
cat >"$TMP/nginx/nginx.conf" <<EOF
user root;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
worker_processes $WORKERS;
events { worker_connections 8192; multi_accept on; }
http {
    client_body_temp_path $TMP/nginx/client_body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    upstream backend {
        server 127.0.0.1:$BACKEND_PORT;
        keepalive $NGINX_KEEPALIVE;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$NGINX_HTTP http2 reuseport backlog=4096;
        location / {
            grpc_pass grpc://backend;
            grpc_set_header Host \$host;
            grpc_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            grpc_set_header X-Real-IP \$remote_addr;
            grpc_set_header X-Forwarded-Proto \$scheme;
            grpc_set_header X-Forwarded-Host \$host;
            grpc_set_header X-Forwarded-Port \$server_port;
        }
    }
}
EOF
if [[ $PEERS == *nginx* ]] && ! nginx -t -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" >"$TMP/nginx-t.log" 2>&1; then
    cat "$TMP/nginx-t.log" >&2
    log "this nginx does not accept the gRPC configuration (needs ngx_http_grpc_module and http2)"
    exit 1
fi

wait_port() { # port [log file to show on failure]
    local port=$1 i
    for ((i = 0; i < 100; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    log "port $port did not open"
    [[ -n ${2:-} && -f ${2:-} ]] && cat "$2" >&2
    return 1
}

# grpc_call PORT NAME: one unary call with curl (h2c prior knowledge); succeeds when the
# answer is HTTP 200 with grpc-status 0 in the trailers and the request message echoed.
grpc_call() {
    local port=$1 name=$2
    curl -sS --max-time 5 --http2-prior-knowledge -X POST \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        --data-binary "@$TMP/call.bin" -D "$TMP/$name.headers" -o "$TMP/$name.body" \
        "http://127.0.0.1:$port$METHOD" || return 1
    # curl writes trailers with the headers: the status line, headers, then the trailers.
    grep -q '^HTTP/2 200' "$TMP/$name.headers" || return 1
    grep -qi '^grpc-status: *0' "$TMP/$name.headers" || return 1
    cmp -s "$TMP/call.bin" "$TMP/$name.body"
}

# --- backend -----------------------------------------------------------------------------
"${ON_LOAD_CPUS[@]}" "$BACKEND_BIN" "127.0.0.1:$BACKEND_PORT" --threads "$BACKEND_THREADS" >"$TMP/backend.log" 2>&1 &
BACKEND_PID=$!
wait_port "$BACKEND_PORT" "$TMP/backend.log"
grpc_call "$BACKEND_PORT" backend || {
    log "backend does not answer the call"; cat "$TMP/backend.headers" >&2 || true; exit 1
}

# --- peers: start, check, stop -----------------------------------------------------------
start_peer() {
    case $1 in
    sluice)
        "${ON_PROXY_CPUS[@]}" "$SLUICE_BIN" --backend "127.0.0.1:$BACKEND_PORT" --backend-protocol GRPC \
            --http-addr "127.0.0.1:$SLUICE_HTTP" --https-addr "127.0.0.1:$SLUICE_HTTPS" \
            --admin-addr "127.0.0.1:$SLUICE_ADMIN" --workers "$WORKERS" \
            --drain-timeout 1s >"$TMP/sluice.log" 2>&1 &
        PEER_PID=$!
        wait_port "$SLUICE_HTTP" "$TMP/sluice.log"
        ;;
    nginx)
        "${ON_PROXY_CPUS[@]}" nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
        PEER_PID=$!
        wait_port "$NGINX_HTTP" "$TMP/nginx/error.log"
        ;;
    esac
}
stop_peer() {
    kill "$PEER_PID" 2>/dev/null || true
    wait "$PEER_PID" 2>/dev/null || true
    PEER_PID=""
}
peer_port() {
    case $1 in
    sluice) echo "$SLUICE_HTTP" ;;
    nginx) echo "$NGINX_HTTP" ;;
    esac
}

for peer in $PEERS; do
    start_peer "$peer"
    ok=1
    grpc_call "$(peer_port "$peer")" "check-$peer" || ok=0
    stop_peer
    if ((!ok)); then
        log "$peer does not proxy the gRPC call correctly; response headers and trailers:"
        cat "$TMP/check-$peer.headers" >&2 2>/dev/null || true
        exit 1
    fi
    log "$peer: unary call answered with grpc-status 0 and the message echoed"
done

# --- runs --------------------------------------------------------------------------------
# cpu_ticks: "total steal" jiffies of all CPUs (steal: time the hypervisor ran someone else).
cpu_ticks() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; printf "%d %d\n", t, $9}' /proc/stat; }

# proxy_ticks PID: user+system jiffies of the proxy, its threads and worker processes.
proxy_ticks() {
    local pid total=0 t
    for pid in $1 $(pgrep -P "$1" 2>/dev/null); do
        t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) || continue
        total=$((total + t))
    done
    echo "$total"
}

# h2load with a hard stop: the run's own duration plus a margin.
SECONDS_PER_RUN=$(awk -v d="$DURATION" 'BEGIN { n = d + 0; if (d ~ /m$/) n *= 60; printf "%d", n }')
h2load_bounded() {
    timeout -k 5 $((SECONDS_PER_RUN + 30)) "${ON_LOAD_CPUS[@]}" h2load \
        -H 'content-type: application/grpc' -H 'te: trailers' -d "$TMP/call.bin" "$@"
}

RESULTS="$TMP/results.tsv"
: >"$RESULTS"
run_h2load() { # peer round
    local peer=$1 round=$2 port
    port=$(peer_port "$peer")
    local out="$TMP/h2load-$peer-$round.txt" reqlog="$TMP/h2load-$peer-$round.log"
    local t0 s0 t1 s1 steal c0 c1 b0 b1
    read -r t0 s0 < <(cpu_ticks)
    c0=$(proxy_ticks "$PEER_PID")
    b0=$(proxy_ticks "$BACKEND_PID")
    h2load_bounded -c "$CONNS" -m "$STREAMS" -t "$H2LOAD_THREADS" -D "$DURATION" \
        --log-file="$reqlog" "http://127.0.0.1:$port$METHOD" >"$out" 2>&1 || true
    c1=$(proxy_ticks "$PEER_PID")
    b1=$(proxy_ticks "$BACKEND_PID")
    read -r t1 s1 < <(cpu_ticks)
    steal=$(awk -v t=$((t1 - t0)) -v s=$((s1 - s0)) 'BEGIN {printf "%.1f", (t > 0 ? 100 * s / t : 0)}')
    # "finished in 5.00s, 41234.40 req/s, ..."; "requests: N total, N started, N done,
    # N succeeded, N failed, N errored, N timeout"; "status codes: N 2xx, ..."; "traffic:
    # ... (N) data".
    local cps done ok2xx failed data errors cpu_us backend_us p50 p99
    cps=$(awk '/^finished in/ {gsub(",", ""); print $4}' "$out")
    read -r done failed < <(awk '/^requests:/ {gsub(",", ""); print $6, $10 + $12 + $14}' "$out")
    ok2xx=$(awk '/^status codes:/ {print $3}' "$out")
    data=$(awk '/^traffic:/ {d = $NF; for (i = 1; i <= NF; i++) if ($(i + 1) == "data") d = $i; gsub(/[()]/, "", d); print d}' "$out")
    # A call failed if h2load says so, if it had no 2xx, or if its response had no message.
    # (A call still in flight when the run stops may have its 2xx and DATA counted but not
    # be "done": hence the clamps at 0.)
    errors=$(awk -v n="${done:-0}" -v f="${failed:-0}" -v ok="${ok2xx:-0}" -v d="${data:-0}" -v fb="$FRAME_BYTES" \
        'BEGIN { s = n - ok; if (s < 0) s = 0; m = n - int(d / fb); if (m < 0) m = 0
                 e = f + (s > m ? s : m); if (n == 0) e = 1; print e }')
    cpu_us=$(awk -v c=$((c1 - c0)) -v r="${done:-0}" -v hz="$(getconf CLK_TCK)" \
        'BEGIN {printf "%.2f", (r > 0 ? c / hz * 1e6 / r : 0)}')
    # The backend's CPU per call too: nginx sends one call at a time per upstream connection,
    # sluice multiplexes them on one, and the backend shares the load generator's cores.
    backend_us=$(awk -v c=$((b1 - b0)) -v r="${done:-0}" -v hz="$(getconf CLK_TCK)" \
        'BEGIN {printf "%.2f", (r > 0 ? c / hz * 1e6 / r : 0)}')
    # Per-call latency (third column, microseconds) from h2load's request log.
    read -r p50 p99 < <(cut -f3 "$reqlog" 2>/dev/null | sort -n | awk '
        { v[NR] = $1 }
        END { if (NR == 0) { print "0 0"; exit }
              i50 = int(NR * 0.50); if (i50 < 1) i50 = 1; i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
              printf "%.3f %.3f\n", v[i50] / 1000, v[i99] / 1000 }')
    rm -f "$reqlog"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$peer" "$round" "${cps:-0}" "$p50" "$p99" "$errors" "$steal" "$cpu_us" "$backend_us" >>"$RESULTS"
    log "$(printf '%-7s round %s: %10s calls/s  p50 %7s ms  p99 %7s ms  cpu %6s us/call  backend cpu %6s us/call  calls %s  failed %s  cpu steal %s%%' \
        "$peer" "$round" "${cps:-0}" "$p50" "$p99" "$cpu_us" "$backend_us" "${done:-0}" "$errors" "$steal")"
    if ((errors != 0)); then
        log "$peer round $round: not every call succeeded; h2load said:"
        cat "$out" >&2
    fi
}

log "workers=$WORKERS duration=$DURATION rounds=$ROUNDS conns=$CONNS streams=$STREAMS" \
    "h2load_threads=$H2LOAD_THREADS backend_threads=$BACKEND_THREADS nginx_keepalive=$NGINX_KEEPALIVE" \
    "cores=$CORES proxy_cpus=${PROXY_CPUS:-any} load_cpus=${LOAD_CPUS:-any}"
for ((round = 1; round <= ROUNDS; round++)); do
    # ABBA order: even rounds run the peers in reverse, so drift and whatever the previous
    # run left behind favour no one.
    order=$PEERS
    if ((round % 2 == 0)); then
        order=$(echo $PEERS | tr ' ' '\n' | tac | tr '\n' ' ')
    fi
    for peer in $order; do
        start_peer "$peer"
        # A short warm-up: connections (client and upstream), pools, caches.
        h2load_bounded -c "$CONNS" -m "$STREAMS" -n 5000 "http://127.0.0.1:$(peer_port "$peer")$METHOD" >/dev/null 2>&1 || true
        run_h2load "$peer" "$round"
        stop_peer
    done
done

# --- report ------------------------------------------------------------------------------
echo
echo "unary gRPC, peers: ${PEERS}; workers=$WORKERS, h2load -c$CONNS -m$STREAMS -t$H2LOAD_THREADS," \
    "$DURATION x $ROUNDS rounds (median), proxy on cpu ${PROXY_CPUS:-any}," \
    "h2load+backend on cpu ${LOAD_CPUS:-any}"
awk -F'\t' '
# median of the values stored in v[key, 1..c]
function median(v, key, c,    a, i, j, x) {
    for (i = 1; i <= c; i++) a[i] = v[key, i]
    for (i = 2; i <= c; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
}
{
    k = $1
    c = ++n[k]
    cps[k, c] = $3; p50[k, c] = $4; p99[k, c] = $5; err[k] += $6; steal[k] += $7; cpu[k, c] = $8; bcpu[k, c] = $9
    if (!(k in seen)) { seen[k] = 1; order[++np] = k }
}
END {
    printf "%-8s %10s %9s %9s %8s %8s %7s %7s %9s %9s %9s\n", "peer", "calls/s", "p50 ms", "p99 ms", "us/call", "be us/c", "failed", "steal%", "cps s/x", "p99 s/x", "cpu s/x"
    ks = "sluice"
    if (ks in n) { sr = median(cps, ks, n[ks]); sp = median(p99, ks, n[ks]); sc = median(cpu, ks, n[ks]) }
    for (j = 1; j <= np; j++) {
        p = order[j]
        r = median(cps, p, n[p]); a = median(p50, p, n[p]); b = median(p99, p, n[p]); c = median(cpu, p, n[p]); bc = median(bcpu, p, n[p])
        ratio_r = "-"; ratio_p = "-"; ratio_c = "-"
        if (p != "sluice" && (ks in n) && r > 0) {
            ratio_r = sprintf("%.2f", sr / r)
            if (b > 0) ratio_p = sprintf("%.2f", sp / b)
            if (c > 0) ratio_c = sprintf("%.2f", sc / c)
        }
        printf "%-8s %10.0f %9.3f %9.3f %8.2f %8.2f %7d %7.1f %9s %9s %9s\n", p, r, a, b, c, bc, err[p], steal[p] / n[p], ratio_r, ratio_p, ratio_c
    }
}' "$RESULTS"
echo "(cps s/x > 1: sluice completes more calls/s; p99 s/x < 1: sluice has lower tail latency;"
echo " us/call: the proxy's own CPU time (user + system) per call; cpu s/x < 1: sluice needs less;"
echo " be us/c: the backend's CPU time per call (it shares the load generator's cores);"
echo " failed: calls without HTTP 2xx or without the echoed message, summed over the rounds;"
echo " steal%: CPU time the hypervisor gave to other guests during the runs; high values mean noisy figures)"
if awk -F'\t' '$6 != 0 { bad = 1 } END { exit !bad }' "$RESULTS"; then
    log "some calls failed (see above)"
    exit 1
fi
