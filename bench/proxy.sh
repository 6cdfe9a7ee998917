#!/usr/bin/env bash
# sluice vs nginx (and haproxy, if present) as reverse proxies in front of the same backend,
# on loopback, measured with wrk. One command: bench/proxy.sh
#
# The backend is nginx itself (`return 200 "ok"` and a 1 MiB static file): light and fixed,
# so the proxies are what differs. Every peer gets the same worker count; runs alternate
# between peers in ABBA order (sluice, nginx, haproxy, haproxy, nginx, sluice, …) so drift
# hits all alike.
#
# Printed per peer and scenario: requests/s, p50, p99 (medians over the rounds), and the
# proxy's own CPU time per request (user + system, from /proc), which a noisy neighbour
# disturbs far less than throughput and tail latency; ratios are sluice / peer.
#
# With WORKERS above 1, each sluice run also prints the requests each worker answered
# (sluice_worker_requests_total) and their max/min ratio: accept-side fairness (issue 16:
# within 2x).
#
# Environment knobs (defaults in brackets):
#   WORKERS [1]      proxy worker threads / processes, the same for every peer
#   DURATION [10s]   length of one wrk run
#   ROUNDS [3]       runs per peer and scenario (alternated); the table shows medians
#   CONNS [50]       wrk connections (small GETs, TLS, new connections)
#   BIG_CONNS [10]   wrk connections for 1 MiB responses
#   WRK_THREADS [1]  wrk threads
#   PIN [auto]       "auto": the proxy under test runs on the last WORKERS cores and wrk +
#                    backend on the others (taskset), when there are more cores than
#                    WORKERS; "off": no pinning. E.g. on 16 cores: WORKERS=8 bench/proxy.sh
#   PEERS ["sluice nginx haproxy"]   which proxies to run (haproxy skipped if not installed;
#                    "sluice-hyper" is sluice with --http1-server hyper, for comparing the two)
#   SLUICE_BASELINE [unset]  path of another build's bench_proxy (e.g. of the previous commit:
#                    `cargo build --release -p sluice-proxy --example bench_proxy` in a
#                    worktree); adds the peer "sluice-base", so one run compares two builds
#   SCENARIOS ["small big close tls tlsnew"]   small keep-alive GETs, 1 MiB responses, a new
#                    connection per request, TLS 1.3 keep-alive, a TLS handshake per request;
#                    and the stream data paths (Gateway API TCPRoute, TLSRoute Passthrough;
#                    nginx's stream module and haproxy's `mode tcp`): "tcp" and "tcpnew"
#                    (keep-alive GETs / a new connection per request, piped), "passthrough"
#                    and "passthroughnew" (TLS piped to the backend, which terminates it:
#                    keep-alive / a TLS handshake per request). E.g.
#                    SCENARIOS="tcp tcpnew passthrough passthroughnew" bench/proxy.sh
set -euo pipefail

WORKERS=${WORKERS:-1}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-50}
BIG_CONNS=${BIG_CONNS:-10}
WRK_THREADS=${WRK_THREADS:-1}
PIN=${PIN:-auto}
PEERS=${PEERS:-"sluice nginx haproxy"}
if [[ -n ${SLUICE_BASELINE:-} && $PEERS != *sluice-base* ]]; then
    PEERS="$PEERS sluice-base"
fi
SCENARIOS=${SCENARIOS:-"small big close tls tlsnew"}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d -t sluice-bench.XXXXXX)
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
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || need+=(nginx-light)
command -v haproxy >/dev/null || need+=(haproxy)
command -v openssl >/dev/null || need+=(openssl)
# nginx's stream module (the stream scenarios' nginx peer) is a module package on Debian.
STREAM_MODULE=/usr/lib/nginx/modules/ngx_stream_module.so
if command -v nginx >/dev/null && nginx -V 2>&1 | grep -q -- '--with-stream=dynamic' && [[ ! -f $STREAM_MODULE ]]; then
    need+=(libnginx-mod-stream)
fi
if ((${#need[@]})); then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need[@]}" >/dev/null || log "some packages could not be installed"
fi
command -v wrk >/dev/null || { log "wrk is required"; exit 1; }
command -v nginx >/dev/null || { log "nginx is required"; exit 1; }
if ! command -v haproxy >/dev/null; then
    PEERS=${PEERS//haproxy/}
fi
# Whether nginx can be a stream peer: its stream module built in, or loadable.
NGINX_STREAM=""
LOAD_STREAM=""
if nginx -V 2>&1 | grep -qE -- '--with-stream( |$)'; then
    NGINX_STREAM=1
elif [[ -f $STREAM_MODULE ]]; then
    NGINX_STREAM=1
    LOAD_STREAM="load_module $STREAM_MODULE;"
fi

log "building sluice (release)"
(cd "$ROOT" && cargo build --release -q -p sluice-proxy --example bench_proxy)
SLUICE_BIN="$ROOT/target/release/examples/bench_proxy"
if [[ -n ${SLUICE_BASELINE:-} && ! -x $SLUICE_BASELINE ]]; then
    log "SLUICE_BASELINE=$SLUICE_BASELINE is not an executable"; exit 1
fi

# --- CPU placement -----------------------------------------------------------------------
CORES=$(nproc)
PROXY_CPUS=""
LOAD_CPUS=""
ON_PROXY_CPUS=()
ON_LOAD_CPUS=()
if [[ $PIN == auto && $CORES -gt $WORKERS ]] && command -v taskset >/dev/null; then
    PROXY_CPUS="$((CORES - WORKERS))-$((CORES - 1))"
    LOAD_CPUS="0-$((CORES - WORKERS - 1))"
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
NGINX_HTTP=$(free_port); NGINX_HTTPS=$(free_port)
HAPROXY_HTTP=$(free_port); HAPROXY_HTTPS=$(free_port)
# Stream scenarios: the backend's TLS port, and each peer's TCP and TLS-passthrough ports.
BACKEND_TLS=$(free_port)
SLUICE_TCP=$(free_port); SLUICE_PASS=$(free_port)
NGINX_TCP=$(free_port); NGINX_PASS=$(free_port)
HAPROXY_TCP=$(free_port); HAPROXY_PASS=$(free_port)

mkdir -p "$TMP/www" "$TMP/backend" "$TMP/nginx"
printf 'ok' >"$TMP/www/index"
head -c 1048576 /dev/zero | tr '\0' 'x' >"$TMP/www/1m"
# ECDSA P-256 for nginx and haproxy, like sluice's generated default certificate.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=bench.local" -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
cat "$TMP/cert.pem" "$TMP/key.pem" >"$TMP/haproxy.pem"

nginx_common() {
    cat <<EOF
user root;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
EOF
}
nginx_temp_paths() {
    cat <<EOF
    client_body_temp_path $1/client_body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
EOF
}

cat >"$TMP/backend/nginx.conf" <<EOF
$(nginx_common "$TMP/backend")
worker_processes 1;
events { worker_connections 4096; }
http {
$(nginx_temp_paths "$TMP/backend")
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:$BACKEND_PORT reuseport backlog=4096;
        listen 127.0.0.1:$BACKEND_TLS ssl reuseport backlog=4096;
        ssl_certificate $TMP/cert.pem;
        ssl_certificate_key $TMP/key.pem;
        location = / { return 200 "ok"; }
        location = /1m { root $TMP/www; }
    }
}
EOF

# nginx as the reverse proxy, configured the way an ingress controller would: upstream
# keep-alive, HTTP/1.1 upstream, the same X-Forwarded-* headers sluice sets.
if [[ -n $NGINX_STREAM ]]; then
    NGINX_STREAM_BLOCK="stream {
    server { listen 127.0.0.1:$NGINX_TCP reuseport backlog=4096; proxy_pass 127.0.0.1:$BACKEND_PORT; }
    # As a TLSRoute: the ClientHello is read (ssl_preread) before the connection is piped.
    server {
        listen 127.0.0.1:$NGINX_PASS reuseport backlog=4096;
        ssl_preread on;
        proxy_pass 127.0.0.1:$BACKEND_TLS;
    }
}"
else
    NGINX_STREAM_BLOCK=""
fi
cat >"$TMP/nginx/nginx.conf" <<EOF
$LOAD_STREAM
$(nginx_common "$TMP/nginx")
worker_processes $WORKERS;
events { worker_connections 8192; multi_accept on; }
http {
$(nginx_temp_paths "$TMP/nginx")
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    upstream backend {
        server 127.0.0.1:$BACKEND_PORT;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$NGINX_HTTP reuseport backlog=4096;
        listen 127.0.0.1:$NGINX_HTTPS ssl reuseport backlog=4096;
        ssl_certificate $TMP/cert.pem;
        ssl_certificate_key $TMP/key.pem;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Real-IP \$remote_addr;
            proxy_set_header X-Forwarded-Proto \$scheme;
            proxy_set_header X-Forwarded-Host \$host;
            proxy_set_header X-Forwarded-Port \$server_port;
        }
    }
}
$NGINX_STREAM_BLOCK
EOF

cat >"$TMP/haproxy.cfg" <<EOF
global
    nbthread $WORKERS
    maxconn 8000
    tune.ssl.default-dh-param 2048
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option http-keep-alive
    http-reuse always
frontend fe
    bind 127.0.0.1:$HAPROXY_HTTP
    bind 127.0.0.1:$HAPROXY_HTTPS ssl crt $TMP/haproxy.pem
    option forwardfor
    http-request set-header X-Real-IP %[src]
    http-request set-header X-Forwarded-Proto https if { ssl_fc }
    http-request set-header X-Forwarded-Proto http if !{ ssl_fc }
    default_backend be
backend be
    server s1 127.0.0.1:$BACKEND_PORT
frontend tcp
    mode tcp
    bind 127.0.0.1:$HAPROXY_TCP
    default_backend be_tcp
backend be_tcp
    mode tcp
    server s1 127.0.0.1:$BACKEND_PORT
# As a TLSRoute: wait for the ClientHello (SNI routing reads it), then pipe.
frontend passthrough
    mode tcp
    bind 127.0.0.1:$HAPROXY_PASS
    tcp-request inspect-delay 5s
    tcp-request content accept if { req_ssl_hello_type 1 }
    default_backend be_tls
backend be_tls
    mode tcp
    server s1 127.0.0.1:$BACKEND_TLS
EOF

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

# --- backend -----------------------------------------------------------------------------
"${ON_LOAD_CPUS[@]}" nginx -p "$TMP/backend" -c "$TMP/backend/nginx.conf" &
BACKEND_PID=$!
wait_port "$BACKEND_PORT" "$TMP/backend/error.log"
[[ $(curl -s "http://127.0.0.1:$BACKEND_PORT/") == ok ]] || { log "backend not answering"; exit 1; }

# --- peers: start, check, stop -----------------------------------------------------------
start_peer() {
    case $1 in
    sluice | sluice-hyper | sluice-base)
        local server=sluice bin=$SLUICE_BIN
        [[ $1 == sluice-hyper ]] && server=hyper
        [[ $1 == sluice-base ]] && bin=$SLUICE_BASELINE
        "${ON_PROXY_CPUS[@]}" "$bin" --backend "127.0.0.1:$BACKEND_PORT" \
            --http-addr "127.0.0.1:$SLUICE_HTTP" --https-addr "127.0.0.1:$SLUICE_HTTPS" \
            --admin-addr "127.0.0.1:$SLUICE_ADMIN" --workers "$WORKERS" \
            --tcp-listen "127.0.0.1:$SLUICE_TCP" --passthrough-listen "127.0.0.1:$SLUICE_PASS" \
            --tls-backend "127.0.0.1:$BACKEND_TLS" \
            --http1-server "$server" --drain-timeout 1s >"$TMP/sluice.log" 2>&1 &
        PEER_PID=$!
        wait_port "$SLUICE_HTTP" "$TMP/sluice.log"; wait_port "$SLUICE_HTTPS"
        ;;
    nginx)
        "${ON_PROXY_CPUS[@]}" nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
        PEER_PID=$!
        wait_port "$NGINX_HTTP" "$TMP/nginx/error.log"; wait_port "$NGINX_HTTPS"
        ;;
    haproxy)
        "${ON_PROXY_CPUS[@]}" haproxy -f "$TMP/haproxy.cfg" -db >"$TMP/haproxy.log" 2>&1 &
        PEER_PID=$!
        wait_port "$HAPROXY_HTTP" "$TMP/haproxy.log"; wait_port "$HAPROXY_HTTPS"
        ;;
    esac
}
stop_peer() {
    kill "$PEER_PID" 2>/dev/null || true
    wait "$PEER_PID" 2>/dev/null || true
    PEER_PID=""
}
peer_ports() {
    case $1 in
    sluice | sluice-hyper | sluice-base) echo "$SLUICE_HTTP $SLUICE_HTTPS" ;;
    nginx) echo "$NGINX_HTTP $NGINX_HTTPS" ;;
    haproxy) echo "$HAPROXY_HTTP $HAPROXY_HTTPS" ;;
    esac
}
stream_ports() { # peer: its TCP and TLS-passthrough ports
    case $1 in
    sluice | sluice-hyper | sluice-base) echo "$SLUICE_TCP $SLUICE_PASS" ;;
    nginx) echo "$NGINX_TCP $NGINX_PASS" ;;
    haproxy) echo "$HAPROXY_TCP $HAPROXY_PASS" ;;
    esac
}

for peer in $PEERS; do
    start_peer "$peer"
    read -r http https < <(peer_ports "$peer")
    body=$(curl -s "http://127.0.0.1:$http/")
    big=$(curl -s "http://127.0.0.1:$http/1m" | wc -c)
    tls=$(curl -sk "https://127.0.0.1:$https/")
    piped=ok passed=ok
    if [[ $peer != nginx || -n $NGINX_STREAM ]]; then
        read -r tcp pass < <(stream_ports "$peer")
        piped=$(curl -s "http://127.0.0.1:$tcp/")
        passed=$(curl -sk "https://127.0.0.1:$pass/")
    fi
    stop_peer
    if [[ $body != ok || $big != 1048576 || $tls != ok || $piped != ok || $passed != ok ]]; then
        log "$peer does not proxy correctly (body=$body big=$big tls=$tls tcp=$piped passthrough=$passed)"
        exit 1
    fi
done

# --- runs --------------------------------------------------------------------------------
# to_ms VALUE: wrk latency ("812.00us", "1.23ms", "2.00s") in milliseconds.
to_ms() {
    awk -v v="$1" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u);
        if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000;
        printf "%.3f", n }'
}

# cpu_ticks: "total steal" jiffies of all CPUs (steal: time the hypervisor ran someone else).
cpu_ticks() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; printf "%d %d\n", t, $9}' /proc/stat; }

# proxy_ticks PID: user+system jiffies of the proxy, its threads and worker processes. CPU
# per request is the figure that steal (a noisy neighbour) disturbs least.
proxy_ticks() {
    local pid total=0 t
    for pid in $1 $(pgrep -P "$1" 2>/dev/null); do
        t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) || continue
        total=$((total + t))
    done
    echo "$total"
}

RESULTS="$TMP/results.tsv"
: >"$RESULTS"
SPREAD="$TMP/spread.tsv"
: >"$SPREAD"
# sluice's requests per worker (sluice_worker_requests_total), one number per worker.
worker_requests() {
    curl -fsS "http://127.0.0.1:$SLUICE_ADMIN/metrics" 2>/dev/null |
        awk -F'[{}" ]+' '/^sluice_worker_requests_total\{/ {print $3, $NF}' | sort -n | awk '{print $2}' | tr '\n' ' '
}
run_wrk() { # peer scenario round
    local peer=$1 scenario=$2 round=$3 http https tcp pass url conns=$CONNS extra=()
    read -r http https < <(peer_ports "$peer")
    read -r tcp pass < <(stream_ports "$peer")
    case $scenario in
    small) url="http://127.0.0.1:$http/" ;;
    big) url="http://127.0.0.1:$http/1m"; conns=$BIG_CONNS ;;
    close) url="http://127.0.0.1:$http/"; extra=(-H "Connection: close") ;;
    tls) url="https://127.0.0.1:$https/" ;;
    tlsnew) url="https://127.0.0.1:$https/"; extra=(-H "Connection: close") ;;
    tcp) url="http://127.0.0.1:$tcp/" ;;
    tcpnew) url="http://127.0.0.1:$tcp/"; extra=(-H "Connection: close") ;;
    passthrough) url="https://127.0.0.1:$pass/" ;;
    passthroughnew) url="https://127.0.0.1:$pass/"; extra=(-H "Connection: close") ;;
    esac
    local out="$TMP/wrk-$peer-$scenario-$round.txt" t0 s0 t1 s1 steal c0 c1 w0="" w1=""
    [[ $peer == sluice* && $WORKERS -gt 1 ]] && w0=$(worker_requests)
    read -r t0 s0 < <(cpu_ticks)
    c0=$(proxy_ticks "$PEER_PID")
    "${ON_LOAD_CPUS[@]}" wrk -t "$WRK_THREADS" -c "$conns" -d "$DURATION" --latency "${extra[@]}" "$url" >"$out" 2>&1 || true
    c1=$(proxy_ticks "$PEER_PID")
    read -r t1 s1 < <(cpu_ticks)
    if [[ -n $w0 ]]; then
        # Accept-side fairness: requests each worker answered during this run.
        w1=$(worker_requests)
        local spread
        spread=$(awk -v a="$w0" -v b="$w1" 'BEGIN {
            n = split(a, x, " "); split(b, y, " "); min = -1; max = 0; s = ""
            for (i = 1; i <= n; i++) { d = y[i] - x[i]; s = s " " d; if (min < 0 || d < min) min = d; if (d > max) max = d }
            printf "%s\t%.2f", s, (min > 0 ? max / min : 0) }')
        printf '%s\t%s\t%s\t%s\n' "$scenario" "$peer" "$round" "$spread" >>"$SPREAD"
        log "$(printf '%-6s %-8s round %s: requests per worker:%s (max/min %s)' "$scenario" "$peer" "$round" "${spread%%$'\t'*}" "${spread##*$'\t'}")"
    fi
    steal=$(awk -v t=$((t1 - t0)) -v s=$((s1 - s0)) 'BEGIN {printf "%.1f", (t > 0 ? 100 * s / t : 0)}')
    local rps p50 p99 errors requests cpu_us
    rps=$(awk '/^Requests\/sec:/ {print $2}' "$out")
    requests=$(awk '/requests in/ {print $1}' "$out")
    cpu_us=$(awk -v c=$((c1 - c0)) -v r="${requests:-0}" -v hz="$(getconf CLK_TCK)" \
        'BEGIN {printf "%.2f", (r > 0 ? c / hz * 1e6 / r : 0)}')
    p50=$(to_ms "$(awk '$1 == "50%" {print $2}' "$out")")
    p99=$(to_ms "$(awk '$1 == "99%" {print $2}' "$out")")
    errors=$(awk '/Non-2xx or 3xx responses:/ {n += $NF} /Socket errors:/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' "$out")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$scenario" "$peer" "$round" "${rps:-0}" "$p50" "$p99" "$errors" "$steal" "$cpu_us" >>"$RESULTS"
    log "$(printf '%-6s %-8s round %s: %10s req/s  p50 %8s ms  p99 %8s ms  cpu %6s us/req  errors %s  cpu steal %s%%' \
        "$scenario" "$peer" "$round" "${rps:-0}" "$p50" "$p99" "$cpu_us" "$errors" "$steal")"
}

log "workers=$WORKERS duration=$DURATION rounds=$ROUNDS conns=$CONNS big_conns=$BIG_CONNS" \
    "wrk_threads=$WRK_THREADS cores=$CORES proxy_cpus=${PROXY_CPUS:-any} load_cpus=${LOAD_CPUS:-any}"
for scenario in $SCENARIOS; do
    for ((round = 1; round <= ROUNDS; round++)); do
        # ABBA order: even rounds run the peers in reverse, so drift and whatever the
        # previous run left behind (warm caches, TIME_WAIT sockets) favour no one.
        order=$PEERS
        if ((round % 2 == 0)); then
            order=$(echo $PEERS | tr ' ' '\n' | tac | tr '\n' ' ')
        fi
        for peer in $order; do
            if [[ $peer == nginx && -z $NGINX_STREAM && $scenario == @(tcp|tcpnew|passthrough|passthroughnew) ]]; then
                continue
            fi
            start_peer "$peer"
            # A short warm-up: connections, pools, caches.
            "${ON_LOAD_CPUS[@]}" wrk -t 1 -c 4 -d 1s "http://127.0.0.1:$(peer_ports "$peer" | cut -d' ' -f1)/" >/dev/null 2>&1 || true
            run_wrk "$peer" "$scenario" "$round"
            stop_peer
        done
    done
done

# --- report ------------------------------------------------------------------------------
echo
echo "peers: ${PEERS}; workers=$WORKERS, wrk -t$WRK_THREADS, $DURATION x $ROUNDS rounds (median)," \
    "proxy on cpu ${PROXY_CPUS:-any}, wrk+backend on cpu ${LOAD_CPUS:-any}"
awk -F'\t' '
# median of the values stored in v[key, 1..c]
function median(v, key, c,    a, i, j, x) {
    for (i = 1; i <= c; i++) a[i] = v[key, i]
    for (i = 2; i <= c; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
}
{
    key = $1 SUBSEP $2
    c = ++n[key]
    rps[key, c] = $4; p50[key, c] = $5; p99[key, c] = $6; err[key] += $7; steal[key] += $8; cpu[key, c] = $9
    if (!($1 in seen_s)) { seen_s[$1] = 1; order_s[++ns] = $1 }
    if (!($2 in seen_p)) { seen_p[$2] = 1; order_p[++np] = $2 }
}
END {
    printf "%-14s %-8s %10s %9s %9s %7s %6s %7s %9s %9s %9s\n", "scenario", "peer", "req/s", "p50 ms", "p99 ms", "us/req", "errors", "steal%", "rps s/x", "p99 s/x", "cpu s/x"
    for (i = 1; i <= ns; i++) {
        s = order_s[i]
        ks = s SUBSEP "sluice"
        if (ks in n) { sr = median(rps, ks, n[ks]); sp = median(p99, ks, n[ks]); sc = median(cpu, ks, n[ks]) }
        for (j = 1; j <= np; j++) {
            p = order_p[j]; k = s SUBSEP p
            if (!(k in n)) continue
            r = median(rps, k, n[k]); a = median(p50, k, n[k]); b = median(p99, k, n[k]); c = median(cpu, k, n[k])
            ratio_r = "-"; ratio_p = "-"; ratio_c = "-"
            if (p != "sluice" && (ks in n) && r > 0 && b > 0) {
                ratio_r = sprintf("%.2f", sr / r)
                ratio_p = sprintf("%.2f", sp / b)
                if (c > 0) ratio_c = sprintf("%.2f", sc / c)
            }
            printf "%-14s %-8s %10.0f %9.3f %9.3f %7.2f %6d %7.1f %9s %9s %9s\n", s, p, r, a, b, c, err[k], steal[k] / n[k], ratio_r, ratio_p, ratio_c
        }
    }
}' "$RESULTS"
echo "(rps s/x > 1: sluice serves more; p99 s/x < 1: sluice has lower tail latency;"
echo " us/req: the proxy's own CPU time (user + system) per request; cpu s/x < 1: sluice needs less;"
echo " steal%: CPU time the hypervisor gave to other guests during the runs; high values mean noisy figures)"
if [[ -s $SPREAD ]]; then
    awk -F'\t' '{ if ($5 == 0 || $5 > worst[$1]) worst[$1] = ($5 == 0 ? "inf" : $5) }
        END { printf "requests per worker, max/min over the rounds (target <= 2):"; for (k in worst) printf " %s %s", k, worst[k]; print "" }' "$SPREAD"
fi
