#!/usr/bin/env bash
# demo.sh: build gpusched, start the daemon on two simulated 24 GiB GPUs in a
# scratch directory, and walk through what it does. Needs root (the daemon
# runs processes as their callers). Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $EUID -eq 0 ]] || { echo "demo: run as root (sudo make demo)" >&2; exit 1; }

make -s build
CRIU=$(scripts/install-criu.sh --print-path) # CRIU >= 4 for the disk tier (quick once installed)
BIN=$PWD/bin
PY=/usr/bin/python3
DIR=$(mktemp -d /tmp/gsdemo.XXXX)
chmod 755 "$DIR"
export GPUSCHED_SOCKET=$DIR/run/gpusched.sock
ctl() { echo "$ gpuschedctl ${*@Q}"; "$BIN/gpuschedctl" "$@"; echo; }

cleanup() {
	[[ -n ${ROUTER:-} ]] && kill "$ROUTER" 2>/dev/null || true
	for p in $("$BIN/gpuschedctl" --json ps 2>/dev/null | /usr/bin/python3 -c 'import json,sys
for p in json.load(sys.stdin)["processes"]:
    if p["state"] != "exited": print(p["init_pid"])' 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
	[[ -n ${DAEMON:-} ]] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT

"$BIN/gpuschedd" --sim 2x24G --socket "$GPUSCHED_SOCKET" --state-dir "$DIR/state" --log-dir "$DIR/logs" \
	--criu "$CRIU" --gpu-poll 100ms --log-format console 2>"$DIR/daemon.log" &
DAEMON=$!
for _ in $(seq 100); do [[ -S $GPUSCHED_SOCKET ]] && break; sleep 0.05; done

echo "== gpuschedd is serving $GPUSCHED_SOCKET on two simulated GPUs"
ctl version
echo "== run two simulated training jobs; each is its own process tree in its own PID namespace"
ctl run policy --gpu 0 -- "$BIN/gpusched-simjob" --vram 18000 --ramp 0.5 --tick 0.5
ctl run reward --gpu 1 -- sh -c "$BIN/gpusched-simjob --vram 9000 --tick 0.5 & wait"
"$BIN/gpuschedctl" logs -f policy | grep -m1 allocated >/dev/null || true
"$BIN/gpuschedctl" logs -f reward | grep -m1 allocated >/dev/null || true
sleep 0.3 # one GPU sample
echo "== GPU memory, attributed over each whole tree (reward's job is a grandchild)"
ctl gpus
ctl ps
ctl logs -n 3 policy
echo "== the protocol is plain JSON lines: socat works too"
echo "\$ echo '{\"method\":\"status\"}' | socat - UNIX-CONNECT:\$GPUSCHED_SOCKET"
if command -v socat >/dev/null; then
	echo '{"method":"status"}' | socat - "UNIX-CONNECT:$GPUSCHED_SOCKET"
else
	echo '{"method":"status"}' | /usr/bin/python3 -c 'import socket,sys,os
s=socket.socket(socket.AF_UNIX); s.connect(os.environ["GPUSCHED_SOCKET"]); s.sendall(sys.stdin.buffer.read()); print(s.makefile().readline(), end="")'
fi
echo
echo "== freeze parks policy's 18 GB in host RAM (simulated at 20 ms/GiB); GPU 0 is free for another model"
ctl freeze policy
ctl run critic --gpu 0 -- "$BIN/gpusched-simjob" --vram 18000 --tick 0.5
"$BIN/gpuschedctl" logs -f critic | grep -m1 allocated >/dev/null || true
echo "== policy does not fit beside critic: thaw refuses (resource_exhausted), swap does both in order"
ctl thaw policy || true
ctl swap critic policy
ctl ps
echo "== critic is frozen in host RAM; hibernate moves it on to disk with CRIU: its process tree is gone from memory"
ctl hibernate critic
ctl snapshots
echo "== a job that exits by itself, and one that is killed (TERM to the whole tree, then KILL after a grace)"
ctl run short -- sh -c 'echo working; exit 3'
ctl wait short || true
ctl kill reward
echo "== the daemon restarts without its processes noticing: kill -9 it and start it again"
kill -9 "$DAEMON"; wait "$DAEMON" 2>/dev/null || true
"$BIN/gpuschedd" --sim 2x24G --socket "$GPUSCHED_SOCKET" --state-dir "$DIR/state" --log-dir "$DIR/logs" \
	--criu "$CRIU" --gpu-poll 100ms --log-format console 2>>"$DIR/daemon.log" &
DAEMON=$!
for _ in $(seq 100); do "$BIN/gpuschedctl" version >/dev/null 2>&1 && break; sleep 0.05; done
ctl ps
echo "== critic's snapshot survived; policy makes room and critic comes back from disk onto GPU 0, its log going on"
ctl kill policy
ctl thaw critic
ctl logs -n 2 critic
echo "== hibernating it again writes only the pages that changed since the snapshot it came from"
ctl hibernate critic
echo "== the queue: a jobs file of five jobs; each starts the moment its declared VRAM fits"
ctl kill critic
cat >"$DIR/jobs.txt" <<JOBS
# 24 GiB GPUs: two 12G jobs share one, a 20G job needs one to itself
[vram=12G name=a] $BIN/gpusched-simjob --vram 12000 --hold 1.5
[vram=12G name=b] $BIN/gpusched-simjob --vram 12000 --hold 1.5
[vram=20G name=big] $BIN/gpusched-simjob --vram 20000 --hold 1
[vram=2G retries=1 name=oom] $BIN/gpusched-simjob --vram 1024 --oom-once $DIR/oom-marker --hold 0.5
[vram=4G name=small] $BIN/gpusched-simjob --vram 3000 --hold 0.5
JOBS
ctl submit --file "$DIR/jobs.txt"
echo "== a job that can never fit (three GPUs on a two-GPU machine) is refused at once, with why"
ctl submit --name huge --vram 20G --gpus 3 -- "$BIN/gpusched-simjob" --vram 20000 || true
ctl jobs --all
"$BIN/gpuschedctl" job wait a >/dev/null || true
"$BIN/gpuschedctl" job wait b >/dev/null || true
"$BIN/gpuschedctl" job wait big >/dev/null || true
"$BIN/gpuschedctl" job wait small >/dev/null || true
echo "== oom ran out of GPU memory once and was retried with its declaration raised to 1.25 x"
ctl job wait oom || true
ctl jobs --all
ctl job oom
echo "== the Python SDK: examples/rl_swap.py hands GPU 1 back and forth between a policy and a reward model"
echo "\$ python3 examples/rl_swap.py --steps 5 --gpu 1"
"$PY" examples/rl_swap.py --steps 5 --gpu 1
echo
echo "== the README's Python SDK example, examples/quickstart.py (on GPU 0)"
echo "\$ PYTHONPATH=sdk/python python3 examples/quickstart.py"
PYTHONPATH=sdk/python PATH="$BIN:$PATH" "$PY" examples/quickstart.py
echo
ctl status
echo "== gpusched-router: two 13 GiB models on GPU 1 (they do not fit together), woken by requests"
echo "   (a cold start loads for 1 s here; as root in the demo, an ordinary user in production)"
read -r RPORT APORT BPORT < <("$PY" -c 'import socket
ss=[socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1",0))
print(*[s.getsockname()[1] for s in ss])') # three free loopback ports
router_model() { # NAME PORT
	echo "[models.$1]"
	echo "cmd = [\"$BIN/gpusched-simjob\", \"--http\", \"\${PORT}\", \"--vram\", \"13312\", \"--model\", \"$1\", \"--load-seconds\", \"1\"]"
	echo "port = $2"
	echo "gpus = [1]"
	echo "vram = \"13G\""
}
{ router_model alpha "$APORT"; router_model beta "$BPORT"; } >"$DIR/router.toml"
sed 's/^/    /' "$DIR/router.toml"
"$BIN/gpusched-router" --config "$DIR/router.toml" --listen 127.0.0.1:$RPORT 2>"$DIR/router.log" &
ROUTER=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:$RPORT/health >/dev/null && break; sleep 0.05; done
ask() { # MODEL WHAT
	local t
	t=$(curl -sS -o "$DIR/reply" -w '%{time_starttransfer}' http://127.0.0.1:$RPORT/v1/chat/completions \
		-H 'Content-Type: application/json' -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}")
	printf '  %-5s %-38s first byte after %6.3f s: %s\n' "$1" "$2" "$t" "$(grep -o '"content":"[^"]*"' "$DIR/reply")"
}
echo "\$ curl http://127.0.0.1:$RPORT/v1/chat/completions -d '{\"model\":\"alpha\",...}'"
ask alpha "(cold start)"
ask beta "(cold start; alpha frozen for room)"
ask alpha "(frozen: thawed, beta frozen)"
ask beta "(frozen: thawed, alpha frozen)"
echo "== the router's wake times by tier (/metrics)"
curl -s http://127.0.0.1:$RPORT/metrics | grep -E '^gpusched_router_wake_seconds_(sum|count)' | sed 's/^/    /'
kill "$ROUTER"; wait "$ROUTER" 2>/dev/null || true
echo "== done; the daemon's own log:"
sed 's/^/    /' "$DIR/daemon.log" | cut -c1-160
