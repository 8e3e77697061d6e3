#!/usr/bin/env bash
# gpu-check.sh: the hardware check of gpusched on a real NVIDIA GPU. Starts a
# private gpuschedd on NVML, freezes/thaws (and migrates, with 2+ GPUs) a
# PyTorch process holding N GiB through each checkpoint driver, verifies its
# tensors after every move, and prints a table; then holds 0.9 of the GPU
# with a filler, runs a 4 GB PyTorch job beside it and checks the usage
# returns to the target. See docs/hardware.md.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: sudo scripts/gpu-check.sh [--sizes "1 4 16"] [--gpu N] [--rounds R]
                                 [--python PATH] [--markdown] [--keep]

Runs gpuschedd on real NVML in a scratch directory and, for each checkpoint
driver (api: libcuda helper; cli: cuda-checkpoint on PATH) and each size,
freezes and thaws a PyTorch workload R times, verifying its tensors after each
thaw (and after a migrate to another GPU when there is one), then prints a table.

  --sizes "LIST"  GiB held by the workload, one run per size (default "1 4 16")
  --gpu N         GPU index to run on (default 0)
  --rounds R      freeze/thaw rounds per size; the table shows medians (default 3)
  --python PATH   Python with PyTorch + CUDA (default python3)
  --markdown      print the results as a markdown table
  --keep          keep the scratch directory (daemon and workload logs)
  -h, --help      this text

Needs root, an NVIDIA driver (570+ for the api driver) and PyTorch. Exit
status: 0 all verified, 1 a check failed, 2 bad usage, 77 no NVIDIA GPU.
GPU_CHECK_BIN=DIR uses the gpuschedd/gpuschedctl in DIR instead of ./bin.
EOF
}

say() { echo "gpu-check: $*" >&2; }
die() { say "$*"; exit 1; }
bad() { say "$*"; exit 2; } # usage errors
SIZES="1 4 16" GPU=0 ROUNDS=3 PY=python3 MARKDOWN=0 KEEP=0
while (($#)); do
	case $1 in
	--sizes | --gpu | --rounds | --python)
		(($# >= 2)) || bad "$1 needs a value"
		case $1 in --sizes) SIZES=$2 ;; --gpu) GPU=$2 ;; --rounds) ROUNDS=$2 ;; --python) PY=$2 ;; esac
		shift 2 ;;
	--sizes=*) SIZES=${1#*=}; shift ;;
	--gpu=*) GPU=${1#*=}; shift ;;
	--rounds=*) ROUNDS=${1#*=}; shift ;;
	--python=*) PY=${1#*=}; shift ;;
	--markdown) MARKDOWN=1; shift ;;
	--keep) KEEP=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) bad "unknown argument '$1' (see --help)" ;;
	esac
done
read -r -a SIZE_LIST <<<"$SIZES"
((${#SIZE_LIST[@]} > 0)) || bad "--sizes is empty"
for s in "${SIZE_LIST[@]}"; do
	[[ $s =~ ^[0-9]+(\.[0-9]+)?$ && ! $s =~ ^0+(\.0+)?$ ]] || bad "bad size '$s' in --sizes (want GB > 0)"
done
[[ $GPU =~ ^[0-9]+$ ]] || bad "--gpu '$GPU': want a GPU index"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || bad "--rounds '$ROUNDS': want a count >= 1"

# Preconditions, cheapest first: a machine without a GPU stops here, clearly.
if ! command -v nvidia-smi >/dev/null 2>&1; then
	say "no NVIDIA GPU: nvidia-smi not found; nothing to check on this machine"
	exit 77
fi
if ! GPU_LIST=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>&1) || [[ -z $GPU_LIST ]]; then
	say "no NVIDIA GPU: nvidia-smi lists none (${GPU_LIST:-no output})"
	exit 77
fi
GPU_INFO=$(nvidia-smi -i "$GPU" --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null) ||
	die "no GPU with index $GPU (nvidia-smi lists: $(echo "$GPU_LIST" | tr '\n' ' '))"
DRIVER_VERSION=${GPU_INFO##*, }
OTHER_GPU=$(echo "$GPU_LIST" | tr -d ' ' | grep -vx "$GPU" | head -n 1 || true)
[[ $EUID -eq 0 ]] || die "run as root (sudo $0 ...): the daemon runs processes as their callers"
command -v "$PY" >/dev/null 2>&1 || die "python '$PY' not found (use --python PATH)"
"$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
	die "$PY has no PyTorch with CUDA (check: $PY -c 'import torch; print(torch.cuda.is_available())')"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORKLOAD=$ROOT/scripts/gpu-check/workload.py
if [[ -n ${GPU_CHECK_BIN:-} ]]; then
	BIN=$GPU_CHECK_BIN
elif command -v go >/dev/null 2>&1; then
	make -s -C "$ROOT" build >&2 || die "make build failed"
	BIN=$ROOT/bin # the Makefile's build target writes here
else
	BIN=$ROOT/bin
fi
[[ -x $BIN/gpuschedd && -x $BIN/gpuschedctl ]] || die "no gpuschedd/gpuschedctl in $BIN (install Go and run make build)"

NOTES=() DRIVERS=()
note() { say "$*"; NOTES+=("note: $*"); }
if [[ ${DRIVER_VERSION%%.*} =~ ^[0-9]+$ ]] && ((${DRIVER_VERSION%%.*} >= 570)); then DRIVERS+=(api)
else note "api: skipped, driver $DRIVER_VERSION (the checkpoint API in libcuda needs 570+)"; fi
if command -v cuda-checkpoint >/dev/null 2>&1; then DRIVERS+=(cli)
else note "cli: skipped, cuda-checkpoint is not on PATH (under sudo: sudo env PATH=\"\$PATH\" ...)"; fi
((${#DRIVERS[@]} > 0)) || die "no checkpoint driver to check"
[[ -n $OTHER_GPU ]] || note "migrate: skipped, one GPU only"

D=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
chmod 755 "$D"
RES=$D/results.tsv
: >"$RES"
DAEMON="" SOCK="" FAILED=0 CLI_COST="" BACKEND="" VERSION="?"
ctl() { "$BIN/gpuschedctl" --socket "$SOCK" "$@"; }
jq_py() { "$PY" -c "import json,sys; r=json.load(sys.stdin); $1"; } # python on one JSON object from stdin

stop_daemon() {
	[[ -n $DAEMON ]] || return 0
	local name pid
	# Managed processes first (TERM to the whole tree, then KILL), then the daemon.
	while read -r name pid; do
		[[ -n $name ]] || continue
		ctl kill "$name" --grace 5s >/dev/null 2>&1 || kill -9 "$pid" 2>/dev/null || true
	done < <(ctl --json ps 2>/dev/null | jq_py 'print("\n".join(p["name"]+" "+str(p["init_pid"]) for p in r["processes"] if p["state"]!="exited"))' 2>/dev/null || true)
	# Fillers outlive a daemon by design: release them before it goes.
	while read -r idx; do
		[[ -n $idx ]] && ctl unfill "$idx" >/dev/null 2>&1 || true
	done < <(ctl --json fillers 2>/dev/null | jq_py 'print("\n".join(str(f["index"]) for f in r["fillers"]))' 2>/dev/null || true)
	kill -TERM "$DAEMON" 2>/dev/null || true
	for _ in $(seq 75); do kill -0 "$DAEMON" 2>/dev/null || break; sleep 0.2; done
	kill -KILL "$DAEMON" 2>/dev/null || true
	wait "$DAEMON" 2>/dev/null || true
	DAEMON=""
}
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_daemon
	if ((rc == 0 && KEEP == 0)); then rm -rf "$D"; else say "logs kept in $D"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_daemon DRV: a private gpuschedd on NVML with checkpoint driver DRV.
start_daemon() {
	local drv=$1 w=$D/$1 got
	mkdir -p "$w"
	SOCK=$w/gs.sock
	local args=(--socket "$SOCK" --state-dir "$w/state" --log-dir "$w/logs" --checkpoint-driver "$drv" --log-format console)
	[[ $drv == cli ]] && args+=(--cuda-checkpoint "$(command -v cuda-checkpoint)")
	"$BIN/gpuschedd" "${args[@]}" >"$w/daemon.log" 2>&1 &
	DAEMON=$!
	for _ in $(seq 300); do # 60 s
		ctl --connect-timeout 1s status >/dev/null 2>&1 && break
		if ! kill -0 "$DAEMON" 2>/dev/null; then
			DAEMON=""
			note "$drv: gpuschedd exited at start: $(tail -n 1 "$w/daemon.log")"
			return 1
		fi
		sleep 0.2
	done
	got=$(ctl --json status 2>/dev/null | jq_py 'print(r["driver"], r["backend"], r["version"])') || got=""
	[[ -n $got ]] || { note "$drv: gpuschedd did not answer on $SOCK within 60 s"; stop_daemon; return 1; }
	read -r got BACKEND VERSION <<<"$got"
	[[ $got == "$drv" ]] || { note "$drv: gpuschedd runs checkpoint driver '$got', not $drv"; stop_daemon; return 1; }
	say "gpuschedd $VERSION ($BACKEND backend, $got driver) on $SOCK"
}

# nlines NAME REGEX: how many lines of NAME's log match REGEX.
nlines() { ctl logs --lines=-1 "$1" 2>/dev/null | grep -c -- "$2" || true; }

# wait_lines NAME REGEX N TIMEOUT_S: until N lines match, the process exits, or time runs out.
wait_lines() {
	local end=$((SECONDS + $4)) state
	while ((SECONDS < end)); do
		(($(nlines "$1" "$2") >= $3)) && return 0
		state=$(ctl --json status "$1" 2>/dev/null | jq_py 'print(r["state"])' 2>/dev/null || echo unknown)
		[[ $state == exited ]] && { say "$1 exited; its log ends:"; ctl logs -n 5 "$1" >&2 || true; return 1; }
		sleep 0.2
	done
	say "$1: no line matching '$2' within $4 s"
	return 1
}

# verify NAME: SIGUSR1 the workload and wait for its new VERIFY line.
verify() {
	local n line
	n=$(nlines "$1" '^VERIFY')
	ctl kill "$1" --signal USR1 >/dev/null || return 1
	wait_lines "$1" '^VERIFY' $((n + 1)) 600 || return 1
	line=$(ctl logs --lines=-1 "$1" | grep -- '^VERIFY' | tail -n 1)
	say "  $line"
	[[ $line == "VERIFY OK "* ]]
}

# move OP NAME [ARGS...]: freeze/thaw/migrate with --json; prints "TOTAL_MS BYTES".
move() {
	local out total bytes phases
	out=$(ctl --json "$@" 2>&1) || { say "  $1 $2 failed: $out"; return 1; }
	read -r total bytes phases < <(echo "$out" | jq_py 'm = r["ms"]; o = "freeze_lock freeze_checkpoint admit lock checkpoint stop continue restore unlock".split()
print("%.1f %d %s" % (m["total"], r["bytes"], ", ".join("%s %.1f" % (k, m[k]) for k in sorted(set(m) - {"total"}, key=lambda k: (o.index(k) if k in o else 99, k)))))') || true
	[[ -n ${bytes:-} ]] || { say "  $1 $2: unexpected result: $out"; return 1; }
	say "  $1: $total ms, $bytes bytes ($phases)"
	echo "$total $bytes"
}

# median_ms CMD...: median wall time of 5 runs of CMD, in ms.
median_ms() {
	local t=() t0
	for _ in 1 2 3 4 5; do
		t0=${EPOCHREALTIME/./}
		"$@" >/dev/null 2>&1 || true
		t+=($((${EPOCHREALTIME/./} - t0)))
	done
	printf '%s\n' "${t[@]}" | sort -n | sed -n 3p | awk '{printf "%.1f", $1 / 1000}'
}

# check_size DRV IDX GB: one workload through R freeze/thaw rounds (+ migrate).
check_size() {
	local drv=$1 gb=$3 name="gc-$1-$2-${3}g" fr=() th=() ok=ok mig=- bytes=0 out pid
	say "$drv, $gb GB: starting $name on GPU $GPU"
	if ctl run "$name" --gpu "$GPU" -- "$PY" "$WORKLOAD" --gb "$gb" >/dev/null &&
		wait_lines "$name" '^READY' 1 $((120 + 10 * ${gb%.*})) && verify "$name"; then
		if [[ -z $CLI_COST ]] && command -v cuda-checkpoint >/dev/null 2>&1; then
			pid=$(ctl --json status "$name" | jq_py 'print(r["pid"])') || pid=""
			[[ -z $pid ]] || CLI_COST=$(median_ms cuda-checkpoint --get-state --pid "$pid")
		fi
		for ((r = 1; r <= ROUNDS; r++)); do
			out=$(move freeze "$name") || { ok=FAIL; fr+=(ERR); break; }
			fr+=("${out% *}"); bytes=${out#* }
			out=$(move thaw "$name") || { ok=FAIL; th+=(ERR); break; }
			th+=("${out% *}")
			verify "$name" || ok=FAIL
		done
		if [[ -n $OTHER_GPU && $ok == ok ]]; then
			if out=$(move migrate "$name" --gpu "$OTHER_GPU"); then
				mig=${out% *}
				verify "$name" || { ok=FAIL; mig="$mig(FAIL)"; }
			else
				ok=FAIL mig=ERR
			fi
		fi
	else
		ok=FAIL
		note "$drv $gb GB: the workload did not start or verify; see $D/$drv/logs"
	fi
	ctl kill "$name" --grace 10s >/dev/null 2>&1 || true
	[[ $ok == ok ]] || FAILED=1
	local IFS=,
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$drv" "$gb" "$bytes" "${fr[*]:--}" "${th[*]:--}" "$ok" "$mig" >>"$RES"
}

for drv in "${DRIVERS[@]}"; do
	start_daemon "$drv" || { FAILED=1; continue; }
	i=0
	for gb in "${SIZE_LIST[@]}"; do check_size "$drv" $((i++)) "$gb"; done
	stop_daemon
done

# used_mib: GPU $GPU's total memory in use, all processes.
used_mib() { ctl --json gpus | jq_py "print([g for g in r['gpus'] if g['index']==$GPU][0]['used_mib'])"; }

# settle TARGET CHUNK TIMEOUT_S: until GPU $GPU's usage is within one chunk
# below TARGET; prints the milliseconds it took, or fails.
settle() {
	local t0=${EPOCHREALTIME/./} u=-
	for ((k = 0; k < $3 * 20; k++)); do
		u=$(used_mib) || return 1
		if ((u <= $1 && u + $2 > $1)); then
			echo $(((${EPOCHREALTIME/./} - t0) / 1000))
			return 0
		fi
		sleep 0.05
	done
	note "filler: GPU $GPU holds $u MiB, not within $2 MiB below $1 after $3 s"
	return 1
}

# frow STEP RESULT [SETTLE_MS]: one row of the filler table.
frow() { printf '%s\t%s\t%s\t%s\n' "$1" "$(used_mib 2>/dev/null || echo -)" "${3:--}" "$2" >>"$FRES"; }

# check_filler DRV: hold 0.9 of the GPU, run a PyTorch job allocating 4 GB in
# the room left, and check that it succeeds and the usage returns to target.
check_filler() {
	local drv=$1 out target chunk ms ok=ok name=gc-filler held
	say "filler: holding 0.9 of GPU $GPU"
	if ! out=$(ctl --json fill "$GPU" --ratio 0.9 --detach); then
		note "filler: fill failed: $out"
		frow "hold 0.9" FAIL
		FAILED=1
		return
	fi
	read -r target chunk <<<"$(echo "$out" | jq_py 'print(r["target_mib"], r["chunk_mib"])')"
	if ms=$(settle "$target" "$chunk" 60); then
		frow "hold 0.9 (target $target MiB)" ok "$ms"
	else
		frow "hold 0.9 (target $target MiB)" FAIL
		ok=FAIL
	fi
	say "filler: a PyTorch job allocates 4 GB beside it"
	if ctl run "$name" --gpu "$GPU" -- "$PY" "$WORKLOAD" --gb 4 >/dev/null &&
		wait_lines "$name" '^READY' 1 180 && verify "$name"; then
		held=$(ctl --json fillers | jq_py "print([f for f in r['fillers'] if f['index']==$GPU][0]['held_mib'])")
		if ms=$(settle "$target" "$chunk" 60); then
			frow "4 GB PyTorch job verified, filler down to $held MiB" ok "$ms"
		else
			frow "4 GB PyTorch job verified, filler at $held MiB" FAIL
			ok=FAIL
		fi
	else
		note "filler: the 4 GB job did not start or verify beside the filler; see $D/$drv/logs/$name.log"
		frow "4 GB PyTorch job" FAIL
		ok=FAIL
	fi
	ctl kill "$name" --grace 10s >/dev/null 2>&1 || true
	if ms=$(settle "$target" "$chunk" 60); then
		frow "job ended: back to the target" ok "$ms"
	else
		frow "job ended: back to the target" FAIL
		ok=FAIL
	fi
	ctl unfill "$GPU" >/dev/null || ok=FAIL
	[[ $ok == ok ]] || FAILED=1
}

FRES=$D/filler.tsv
: >"$FRES"
if start_daemon "${DRIVERS[0]}"; then
	check_filler "${DRIVERS[0]}"
	stop_daemon
else
	FAILED=1
fi

HEAD=("GPU $GPU: ${GPU_INFO%, *}, driver $DRIVER_VERSION; $(echo "$GPU_LIST" | wc -l) GPU(s); $(date -u '+%Y-%m-%d %H:%M UTC')"
	"gpusched $VERSION (${BACKEND:-?} backend); $ROUNDS freeze/thaw rounds per size")
[[ -z $CLI_COST ]] || HEAD+=("cuda-checkpoint --get-state start cost: $CLI_COST ms (median of 5); the cli driver pays one per step (lock, checkpoint, restore, unlock), the api driver none")
"$PY" - "$RES" "$MARKDOWN" "${HEAD[@]}" "${NOTES[@]}" <<'EOF'
import statistics, sys
res, markdown, head = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
FLOOR = 20.0  # ms per GB: ~50 GB/s host link per direction (H100/H200)

def med(csv):  # median of the rounds that worked; "ERR" when none did
    v = [float(x) for x in csv.split(",") if x not in ("-", "ERR")]
    return statistics.median(v) if v else ("ERR" if "ERR" in csv else None)

def f(v, fmt="%.1f"):
    return v if isinstance(v, str) else "-" if v is None else fmt % v

cols = ["driver", "GiB", "moved GiB", "freeze ms", "thaw ms", "ms/GB", "x floor", "verify", "migrate ms"]
rows = []
for line in open(res):
    drv, gb, nbytes, fr, th, ok, mig = line.rstrip("\n").split("\t")
    fz, tw = med(fr), med(th)
    gbytes = int(nbytes) / 1e9 if int(nbytes) > 0 else float(gb) * 1.073741824
    per = (fz + tw) / (2 * gbytes) if isinstance(fz, float) and isinstance(tw, float) else None
    rows.append([drv, gb, f(int(nbytes) / 2**30 if int(nbytes) else None, "%.2f"), f(fz), f(tw),
                 f(per), f(per / FLOOR if per else None, "%.2f"), ok, mig])
if markdown:
    for h in head:
        print("- " + h)
    print()
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" if c in ("driver", "verify") else "---:" for c in cols) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
else:
    for h in head:
        print(h)
    w = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    for r in [cols] + rows:
        print("  ".join(v.ljust(w[i]) if i == 0 else v.rjust(w[i]) for i, v in enumerate(r)))
print("\nms/GB = (freeze + thaw) / (2 x GB moved as the driver reports it, 1 GB = 1e9 bytes); x floor = ms/GB / %g" % FLOOR)
EOF
echo
echo "Filler on GPU $GPU (fill --ratio 0.9; settle = until usage is within one chunk below the target):"
"$PY" - "$FRES" "$MARKDOWN" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
cols = ["step", "GPU used MiB", "settle ms", "result"]
if sys.argv[2] == "1":
    print("| " + " | ".join(cols) + " |")
    print("|---|---:|---:|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
else:
    w = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    for r in [cols] + rows:
        print("  ".join(v.ljust(w[i]) for i, v in enumerate(r)))
EOF
((FAILED == 0)) || die "some checks FAILED (see the tables and notes above)"
say "all checks passed"
