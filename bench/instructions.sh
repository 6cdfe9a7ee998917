#!/usr/bin/env bash
# Instructions per proxied request, counted by valgrind's callgrind: this build's
# bench_proxy against another build (SLUICE_BASELINE), side by side in one run.
#
# CPU time per request (bench/proxy.sh) moves by a few percent with whatever else the
# machine runs; an instruction count does not: the same build gives the same count to a
# fraction of a percent. Use it to compare two builds on a small or shared machine where
# hardware counters are not available (virtual machines); use bench/proxy.sh for speed.
#
# Each build serves REQUESTS small GETs (nginx `return 200` as the backend) over CONNS
# keep-alive connections, instrumented only while the requests run (startup and shutdown
# are not counted); builds alternate ABBA for ROUNDS rounds. Printed: instructions per
# request for each run, the medians, and the ratio this / baseline.
#
#   SLUICE_BASELINE=/path/to/old/bench_proxy bench/instructions.sh
#
# Environment knobs (defaults in brackets): REQUESTS [4000], CONNS [4], ROUNDS [2],
# SLUICE_BIN [this checkout's release bench_proxy, built if needed].
set -euo pipefail

REQUESTS=${REQUESTS:-4000}
CONNS=${CONNS:-4}
ROUNDS=${ROUNDS:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d -t sluice-instr.XXXXXX)
PIDS=()

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { echo "[instructions] $*" >&2; }

for tool in valgrind callgrind_control nginx python3; do
    command -v "$tool" >/dev/null || { log "$tool is required (apt-get install valgrind nginx-light)"; exit 1; }
done
if [[ -z ${SLUICE_BIN:-} ]]; then
    log "building sluice (release)"
    (cd "$ROOT" && cargo build --release -q -p sluice-proxy --example bench_proxy)
    SLUICE_BIN="$ROOT/target/release/examples/bench_proxy"
fi
BUILDS=(this)
[[ -n ${SLUICE_BASELINE:-} ]] && BUILDS+=(baseline)

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
wait_port() {
    for _ in $(seq 1 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    log "port $1 never opened"; exit 1
}
BACKEND_PORT=$(free_port)
mkdir -p "$TMP/backend"
cat >"$TMP/backend/nginx.conf" <<EOF
daemon off;
pid $TMP/backend/nginx.pid;
error_log $TMP/backend/error.log warn;
worker_processes 1;
events { worker_connections 1024; }
http {
    client_body_temp_path $TMP/backend/cb; proxy_temp_path $TMP/backend/p;
    fastcgi_temp_path $TMP/backend/f; uwsgi_temp_path $TMP/backend/u; scgi_temp_path $TMP/backend/s;
    access_log off;
    keepalive_requests 1000000;
    server { listen 127.0.0.1:$BACKEND_PORT; location / { return 200 "ok"; } }
}
EOF
nginx -p "$TMP/backend" -c "$TMP/backend/nginx.conf" &
PIDS+=($!)
wait_port "$BACKEND_PORT"

# REQUESTS GETs over CONNS keep-alive connections, each answer checked.
cat >"$TMP/load.py" <<'EOF'
import http.client, sys, threading
port, total, conns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
bad = []
def run(n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for _ in range(n):
        c.request("GET", "/", headers={"Host": "bench.local"})
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or body != b"ok":
            bad.append(r.status)
    c.close()
threads = [threading.Thread(target=run, args=(total // conns,)) for _ in range(conns)]
for t in threads: t.start()
for t in threads: t.join()
if bad:
    sys.exit(f"{len(bad)} bad answers, e.g. {bad[0]}")
EOF

# One instrumented run of build $1; prints instructions per request.
measure() {
    local bin=$SLUICE_BIN port admin https out pid
    [[ $1 == baseline ]] && bin=$SLUICE_BASELINE
    port=$(free_port); https=$(free_port); admin=$(free_port)
    out="$TMP/callgrind.$1.$RANDOM"
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
        "$bin" --backend "127.0.0.1:$BACKEND_PORT" --http-addr "127.0.0.1:$port" \
        --https-addr "127.0.0.1:$https" --admin-addr "127.0.0.1:$admin" --workers 1 \
        --drain-timeout 1s >"$TMP/sluice.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_port "$port"
    # Warm up (connections, pools, the first snapshot hold), then count.
    python3 "$TMP/load.py" "$port" "$((CONNS * 10))" "$CONNS"
    callgrind_control -i on "$pid" >/dev/null 2>&1
    python3 "$TMP/load.py" "$port" "$REQUESTS" "$CONNS"
    callgrind_control -i off "$pid" >/dev/null 2>&1
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    local total
    total=$(awk '/^totals:/ {print $2; exit}' "$out")
    python3 -c "print(round($total / $REQUESTS))"
}

declare -A RUNS
order=()
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then order+=("${BUILDS[@]}"); else
        for ((i = ${#BUILDS[@]} - 1; i >= 0; i--)); do order+=("${BUILDS[$i]}"); done
    fi
done
for build in "${order[@]}"; do
    n=$(measure "$build")
    log "$build: $n instructions per request"
    RUNS[$build]="${RUNS[$build]:-} $n"
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
printf '%-10s %s\n' build "instructions/request (median; runs)"
for build in "${BUILDS[@]}"; do
    printf '%-10s %s (%s)\n' "$build" "$(echo "${RUNS[$build]}" | median)" "${RUNS[$build]# }"
done
if [[ -n ${SLUICE_BASELINE:-} ]]; then
    this=$(echo "${RUNS[this]}" | median)
    base=$(echo "${RUNS[baseline]}" | median)
    python3 -c "print(f'ratio this/baseline: {$this / $base:.3f}')"
fi
