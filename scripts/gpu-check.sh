#!/usr/bin/env bash
# gpu-check.sh: the hardware check of gpusched on a real NVIDIA GPU, in
# phases that each fit a lent machine's 10-minute call and resume where an
# earlier call stopped. It runs the binaries of a bundle built elsewhere
# (make gpu-check-bundle), writes every result as it comes into one results
# directory, and with --dry-run runs the same steps on simulated GPUs with
# the fake cuda-checkpoint and libcuda (make test does). See docs/hardware.md.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: sudo scripts/gpu-check.sh [--out DIR] [--from DIR] [--phase LIST] [--budget S]
                                 [--bundle DIR] [--dry-run] [--sizes "1 4 16"]
                                 [--gpu N] [--rounds R] [--python PATH]

Checks gpusched on a real NVIDIA GPU, phase by phase:
  preflight  nvidia-smi, driver version, persistence mode, cuda-checkpoint
             (--help, version), libcuda, PyTorch, CRIU, the bundle's binaries
  api        freeze/thaw (and migrate, with 2+ GPUs) of a PyTorch process
             holding each --sizes GiB, through the libcuda helper, verifying
             its tensors after every move
  cli        the same through cuda-checkpoint
  filler     hold 0.9 of the GPU, run a 4 GiB job beside it, settle back
  hibernate  freeze, dump to disk with CRIU and thaw back the smallest size
  frozen     the smallest size, run by a user in a delegated cgroup that is
             then frozen (cgroup.freeze): the daemon's freeze and thaw fail
             at once, then pass once thawed; what cuda-checkpoint's
             get-state, lock, checkpoint, restore and unlock do meanwhile
  util       a busy and an idle 0.25 GiB workload on one GPU: each one's own
             utilization as gpus shows it (NVML's per-process samples), and
             the idle policy freezing the idle one only
Every run ends by writing the report (report.md) from what is done so far.

  --out DIR      results directory (default gpu-check-results): state.tsv,
                 moves.tsv, filler.tsv, hibernate.tsv, frozen.tsv,
                 progress.log, logs.tar.gz (the preflight's findings too),
                 report.md; written as they come
  --from DIR     continue the results in DIR (an earlier call's --out, brought
                 back): copied into an --out that holds none yet; a DIR
                 without results (state.tsv) starts afresh
  --phase LIST   comma-separated phases to run, again if already done, or
                 "report"; default "all": every phase not yet finished
  --budget S     seconds this call may use (default 540); a phase or size
                 that would not fit is left for the next call (exit 75)
  --bundle DIR   binaries from make gpu-check-bundle (default ./.gpu-check)
  --dry-run      simulated GPUs (gpuschedd --sim 2x80G), the bundle's fake
                 cuda-checkpoint and libcuda, gpusched-simjob --gpu-check as
                 the workload: checks the script, not the hardware
  --sizes LIST   GiB held by the workload, one run per size (default "1 4 16")
  --gpu N        GPU index to run on (default 0)
  --rounds R     freeze/thaw rounds per size; the report shows medians (default 3)
  --python PATH  Python with PyTorch + CUDA (default python3)
  -h, --help     this text

--sizes, --gpu, --rounds, --python and --dry-run are fixed by the first call
into a results directory; a later call may repeat them, not change them.
Exit status: 0 every phase done and passed; 1 a check failed; 2 bad usage
(nothing written); 75 phases left for another call; 77 no NVIDIA GPU.
EOF
}

say() { printf 'gpu-check: %s\n' "$*" >&2; [[ -z ${LOG:-} ]] || printf '%s %s\n' "$(date -u +%T)" "$*" >>"$LOG"; }
die() { say "$*"; exit 1; }
bad() { printf 'gpu-check: %s\n' "$*" >&2; exit 2; } # usage errors: before anything is written

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PHASES=(preflight api cli filler hibernate frozen util)
# At most 8: what a device call brings back from $OUT.
RESULT_FILES=(state.tsv moves.tsv filler.tsv hibernate.tsv frozen.tsv progress.log logs.tar.gz report.md)
OUTDIR=gpu-check-results FROM="" PHASE_ARG=all BUDGET=540 BUNDLE=$ROOT/.gpu-check
declare -A OPT=() # settings given on the command line
while (($#)); do
	case $1 in
	--out | --from | --phase | --budget | --bundle | --sizes | --gpu | --rounds | --python)
		(($# >= 2)) || bad "$1 needs a value"
		case $1 in
		--out) OUTDIR=$2 ;; --from) FROM=$2 ;; --phase) PHASE_ARG=$2 ;; --budget) BUDGET=$2 ;;
		--bundle) BUNDLE=$2 ;; *) OPT[${1#--}]=$2 ;;
		esac
		shift 2 ;;
	--dry-run) OPT[mode]=dry-run; shift ;;
	-h | --help) usage; exit 0 ;;
	*) bad "unknown argument '$1' (see --help)" ;;
	esac
done

# ---- validation: nothing is written before it passes

[[ $BUDGET =~ ^[1-9][0-9]*$ ]] || bad "--budget '$BUDGET': want seconds > 0"
[[ -n $OUTDIR ]] || bad "--out is empty"
RUN=()
if [[ $PHASE_ARG != all ]]; then
	IFS=, read -r -a want <<<"$PHASE_ARG"
	((${#want[@]} > 0)) || bad "--phase is empty"
	for p in "${want[@]}"; do
		[[ $p == report || " ${PHASES[*]} " == *" $p "* ]] || bad "--phase: unknown phase '$p' (phases: ${PHASES[*]}, report)"
	done
	for p in "${PHASES[@]}"; do [[ ",$PHASE_ARG," == *",$p,"* ]] && RUN+=("$p"); done
fi

# recorded FILE KEY: the last value a state file records for KEY.
recorded() { [[ -f $1 ]] && awk -F'\t' -v k="$2" '$1 == "fact" && $2 == k {v = $3} END {printf "%s", v}' "$1"; }
STATE_SRC=$OUTDIR/state.tsv
if [[ -n $FROM ]]; then
	[[ -d $FROM ]] || bad "--from $FROM: not a directory (want an earlier call's --out)"
	[[ -f $FROM/state.tsv ]] || { echo "gpu-check: $FROM holds no results yet: starting afresh" >&2; FROM=""; }
	[[ -z $FROM || -f $STATE_SRC ]] || STATE_SRC=$FROM/state.tsv
fi
declare -A SET=([sizes]="1 4 16" [gpu]=0 [rounds]=3 [python]=python3 [mode]=hardware)
declare -A NEWSET=() # settings to record: the first call into a results directory
for k in "${!SET[@]}"; do
	r=$(recorded "$STATE_SRC" "$k" || true)
	if [[ -n $r ]]; then
		[[ -z ${OPT[$k]:-} || ${OPT[$k]} == "$r" ]] ||
			bad "the results in $(dirname "$STATE_SRC") were made with ${k/mode/--dry-run or not}: '$r', not '${OPT[$k]}'; use a new --out"
		SET[$k]=$r
	else
		SET[$k]=${OPT[$k]:-${SET[$k]}}
		NEWSET[$k]=${SET[$k]}
	fi
done
read -r -a SIZE_LIST <<<"${SET[sizes]}"
((${#SIZE_LIST[@]} > 0)) || bad "--sizes is empty"
for s in "${SIZE_LIST[@]}"; do
	[[ $s =~ ^[0-9]+(\.[0-9]+)?$ && ! $s =~ ^0+(\.0+)?$ ]] || bad "bad size '$s' in --sizes (want GiB > 0)"
done
[[ ${SET[gpu]} =~ ^[0-9]+$ ]] || bad "--gpu '${SET[gpu]}': want a GPU index"
[[ ${SET[rounds]} =~ ^[1-9][0-9]*$ ]] || bad "--rounds '${SET[rounds]}': want a count >= 1"
GPU=${SET[gpu]} ROUNDS=${SET[rounds]} DRY=0 HOLD=6 # HOLD: seconds the frozen phase keeps a tool call frozen
[[ ${SET[mode]} == dry-run ]] && DRY=1 HOLD=2
PY=$(command -v "${SET[python]}" 2>/dev/null) || bad "python '${SET[python]}' not found (use --python PATH)"
BUNDLE=$(cd "$BUNDLE" 2>/dev/null && pwd -P) || bad "no bundle at $BUNDLE: run make gpu-check-bundle (docs/hardware.md)"
BIN=$BUNDLE/bin
for b in gpuschedd gpusched-init gpuschedctl gpusched-simjob; do
	[[ -x $BIN/$b ]] || bad "no $b in $BIN: run make gpu-check-bundle"
done
if ((DRY)); then
	[[ -x $BUNDLE/sim/cuda-checkpoint && -f $BUNDLE/sim/libcuda.so.1 ]] || bad "no fakes in $BUNDLE/sim: run make gpu-check-bundle"
fi
[[ $EUID -eq 0 ]] || bad "run as root: the daemon runs processes as their callers"

# ---- the results directory

mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
STATE=$OUTDIR/state.tsv LOG=$OUTDIR/progress.log MOVES=$OUTDIR/moves.tsv
FRES=$OUTDIR/filler.tsv HRES=$OUTDIR/hibernate.tsv ZRES=$OUTDIR/frozen.tsv
if [[ -n $FROM && ! -f $STATE ]]; then
	for f in "${RESULT_FILES[@]}"; do [[ ! -f $FROM/$f ]] || cp "$FROM/$f" "$OUTDIR/$f"; done
	say "continuing the results of $FROM"
fi
touch "$STATE" "$MOVES" "$FRES" "$HRES" "$ZRES"
declare -A FACT=()
while IFS=$'\t' read -r kind k v _; do [[ $kind != fact ]] || FACT[$k]=$v; done <"$STATE"
set_fact() { FACT[$1]=$2; printf 'fact\t%s\t%s\n' "$1" "$2" >>"$STATE"; }
for k in "${!NEWSET[@]}"; do set_fact "$k" "${NEWSET[$k]}"; done
# status NAME: a phase's last recorded status (started, ok, failed, skipped) or "".
status() { awk -F'\t' -v p="$1" '$1 == "phase" && $2 == p {s = $3} END {printf "%s", s}' "$STATE"; }
mark() { printf 'phase\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "${3:-}" "$(date -u '+%Y-%m-%d %H:%M:%S')" "${4:-}" >>"$STATE"; }

T0=$SECONDS
left() { echo $((BUDGET - (SECONDS - T0))); }
# cap SECS: SECS, or less when the budget has less left (at least 5 s).
cap() { local l; l=$(left); ((l < $1)) || { echo "$1"; return; }; echo $((l > 5 ? l : 5)); }
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
chmod 755 "$WORK"
[[ ! -f $OUTDIR/logs.tar.gz ]] || tar -xzf "$OUTDIR/logs.tar.gz" -C "$WORK" 2>/dev/null || true
mkdir -p "$WORK/logs"
PRE=$WORK/logs/preflight.txt # comes back in logs.tar.gz
ctl() { "$BIN/gpuschedctl" --socket "$SOCK" "$@"; }
jq_py() { "$PY" -c "import json,sys; r=json.load(sys.stdin); $1"; } # python on one JSON object from stdin
DAEMON="" SOCK="" LASTNOTE=""
FZ_TOP="" FZ="" FZ_USER="" # the frozen phase's cgroups and the user it made, for cleanup
# RUNAS, with copies of the CLI and the workload the user can reach, runs
# it as another user (the frozen phase); as_root undoes that.
as_root() { RUNAS=() RUNCTL=$BIN/gpuschedctl SIMJOB=$BIN/gpusched-simjob WORKLOAD=$ROOT/scripts/gpu-check/workload.py; }
as_root
# note TEXT: a note for the report (kept in state.tsv), and why a phase failed.
note() { say "note: $*"; LASTNOTE=$*; printf 'note\t%s\n' "$*" >>"$STATE"; }

# reap_leftovers: end what an earlier call killed at its time limit left
# running: processes of this bundle's gpuschedd (daemons, the inits of
# managed trees with their workloads, helpers, fillers).
reap_leftovers() {
	local exe p
	for p in /proc/[0-9]*; do
		exe=$(readlink "$p/exe" 2>/dev/null) || continue
		[[ $exe == "$BIN/gpuschedd" ]] || continue
		kill -KILL "${p#/proc/}" 2>/dev/null && say "ended leftover process ${p#/proc/} ($exe)"
	done
	return 0
}

stop_daemon() {
	[[ -n $DAEMON ]] || return 0
	local name pid
	while read -r name pid; do # managed trees: TERM, then KILL
		[[ -n $name ]] || continue
		ctl kill "$name" --grace 5s >/dev/null 2>&1 || kill -9 "$pid" 2>/dev/null || true
	done < <(ctl --json ps 2>/dev/null | jq_py 'print("\n".join(p["name"]+" "+str(p["init_pid"]) for p in r["processes"] if p["state"] not in ("exited", "hibernated")))' 2>/dev/null || true)
	while read -r idx; do # fillers outlive a daemon by design
		[[ -z $idx ]] || ctl unfill "$idx" >/dev/null 2>&1 || true
	done < <(ctl --json fillers 2>/dev/null | jq_py 'print("\n".join(str(f["index"]) for f in r["fillers"]))' 2>/dev/null || true)
	kill -TERM "$DAEMON" 2>/dev/null || true
	timeout 15 tail --pid="$DAEMON" -s 0.1 -f /dev/null || kill -KILL "$DAEMON" 2>/dev/null || true
	wait "$DAEMON" 2>/dev/null || true
	DAEMON=""
}

# save_logs: the logs of every phase so far, into the results; each log cut
# to its last 4 MiB, so that the archive stays under the 16 MiB a file from
# $OUT may have.
save_logs() {
	local f
	find "$WORK/logs" -type f -size +4M -print0 | while IFS= read -r -d '' f; do
		tail -c 4M "$f" >"$f.cut" && mv "$f.cut" "$f"
	done
	if tar -czf "$OUTDIR/logs.tar.gz.tmp" -C "$WORK" logs 2>/dev/null; then
		mv "$OUTDIR/logs.tar.gz.tmp" "$OUTDIR/logs.tar.gz"
	fi
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	frozen_thaw
	stop_daemon
	reap_leftovers
	frozen_remove
	save_logs
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_daemon PHASE DRIVER [CRIU [FLAGS...]]: a private gpuschedd (NVML, or
# --sim 2x80G on a dry run) with checkpoint driver DRIVER, logging under the
# phase; FLAGS come last (and win).
start_daemon() {
	local w=$WORK/logs/$1 drv=$2 end got
	mkdir -p "$w"
	SOCK=$WORK/$1.sock
	local args=(--socket "$SOCK" --state-dir "$WORK/state-$1" --log-dir "$w" --log-format console
		--checkpoint-driver "$drv" --criu "${3:-none}" --cgroup-root none --user-cgroups none "${@:4}")
	local env=()
	if ((DRY)); then
		args+=(--sim 2x80G)
		[[ $drv != api ]] || args+=(--libcuda "$BUNDLE/sim/libcuda.so.1")
		env=(GPUSCHED_FAKE_CUDA_CHECKPOINT="$BUNDLE/sim/cuda-checkpoint") # read by the fake libcuda
	fi
	[[ $drv != cli ]] || args+=(--cuda-checkpoint "${FACT[cuda_checkpoint]}")
	env "${env[@]}" "$BIN/gpuschedd" "${args[@]}" >"$w/daemon.log" 2>&1 &
	DAEMON=$!
	end=$((SECONDS + 60))
	until ctl --connect-timeout 1s status >/dev/null 2>&1; do
		if ! kill -0 "$DAEMON" 2>/dev/null || ((SECONDS > end)); then
			note "$1: gpuschedd did not start within 60 s: $(tail -n 1 "$w/daemon.log")"
			stop_daemon
			return 1
		fi
		sleep 0.1
	done
	got=$(ctl --json status | jq_py 'print(r["driver"], r["backend"], r["version"])') || got=""
	read -r got BACKEND VERSION <<<"$got"
	[[ -n ${FACT[gpusched]:-} ]] || set_fact gpusched "$VERSION ($BACKEND backend)"
	[[ $got == "$drv" ]] || { note "$1: gpuschedd runs checkpoint driver '$got', not $drv"; stop_daemon; return 1; }
	say "$1: gpuschedd $VERSION ($BACKEND backend, $got driver)"
}

# wait_line NAME REGEX N SECS: prints the Nth line of NAME's log matching
# REGEX, following the log until it comes, the process exits or SECS pass.
wait_line() {
	local line n=0 fpid
	coproc FOLLOW { exec timeout "$(cap "$4")" "$BIN/gpuschedctl" --socket "$SOCK" logs -f --lines=-1 "$1" 2>&1; }
	fpid=$FOLLOW_PID
	while IFS= read -r line <&"${FOLLOW[0]}"; do
		[[ $line =~ $2 ]] && ((++n >= $3)) && break
	done
	kill "$fpid" 2>/dev/null || true
	wait "$fpid" 2>/dev/null || true
	if ((n < $3)); then
		say "$1: no line matching '$2' (exited, or not within $4 s); its log ends:"
		ctl logs -n 5 "$1" 2>&1 | sed 's/^/    /' >&2 || true
		return 1
	fi
	printf '%s\n' "$line"
}

# verify NAME GB: SIGUSR1 the workload and wait for its next VERIFY line.
verify() {
	local n line
	n=$(ctl logs --lines=-1 "$1" 2>/dev/null | grep -c '^VERIFY' || true)
	ctl kill "$1" --signal USR1 >/dev/null || return 1
	line=$(wait_line "$1" '^VERIFY' $((n + 1)) $((60 + 2 * ${2%.*}))) || return 1
	say "  $line"
	[[ $line == "VERIFY OK "* ]] || { note "$1: $line"; return 1; }
}

# start_workload NAME GB [busy]: the workload as a managed process on GPU
# $GPU, until READY (busy: computing without pause from then on); prints
# its host pid as the daemon knows it (the CUDA process: the tree's /proc
# is its own PID namespace's, so the workload cannot know it).
start_workload() {
	local cmd line pid
	if ((DRY)); then
		cmd=("$SIMJOB" --gpu-check --vram "$(awk -v g="$2" 'BEGIN {printf "%d", g * 1024}')" --host-mem 16)
		[[ -z ${3:-} ]] || cmd+=(--util 60)
	else
		cmd=("$PY" "$WORKLOAD" --gb "$2")
		[[ -z ${3:-} ]] || cmd+=(--busy)
	fi
	"${RUNAS[@]}" "$RUNCTL" --socket "$SOCK" run "$1" --gpu "$GPU" -- "${cmd[@]}" >/dev/null || return 1
	line=$(wait_line "$1" '^READY ' 1 $((90 + 5 * ${2%.*}))) || return 1
	pid=$(ctl --json status "$1" | jq_py 'print(r["pid"])') || return 1
	[[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
	echo "$pid"
}

# move OP NAME [ARGS...]: freeze/thaw/migrate/hibernate with --json; prints "TOTAL_MS BYTES".
move() {
	local out total bytes phases
	out=$(timeout "$(cap 600)" "$BIN/gpuschedctl" --socket "$SOCK" --json "$@" 2>&1) || { note "$1 $2 failed: $(echo "$out" | tail -n 1)"; return 1; }
	read -r total bytes phases < <(echo "$out" | jq_py 'm = r["ms"]; o = "freeze_lock freeze_checkpoint admit lock checkpoint stop continue restore unlock".split()
b = r.get("written", r.get("bytes", 0))
print("%.1f %d %s" % (m["total"], b, ", ".join("%s %.1f" % (k, m[k]) for k in sorted(set(m) - {"total"}, key=lambda k: (o.index(k) if k in o else 99, k)))))') || true
	[[ -n ${bytes:-} ]] || { say "  $1 $2: unexpected result: $out"; return 1; }
	say "  $1: $total ms, $bytes bytes ($phases)"
	echo "$total $bytes"
}

# median_ms CMD...: median wall time of 5 runs of CMD, in ms.
median_ms() {
	local ts=() t0
	for _ in 1 2 3 4 5; do
		t0=${EPOCHREALTIME/./}
		"$@" >/dev/null 2>&1 || true
		ts+=($((${EPOCHREALTIME/./} - t0)))
	done
	printf '%s\n' "${ts[@]}" | sort -n | sed -n 3p | awk '{printf "%.1f", $1 / 1000}'
}

# est_size GB: seconds a size is planned to take (an estimate, to decide
# whether it fits the budget; docs/hardware.md has the measured times).
est_size() { awk -v g="$1" -v r="$ROUNDS" 'BEGIN {printf "%d", 30 + 4 * g + r * g}'; }

# check_size DRV GB: one workload through R freeze/thaw rounds (+ migrate);
# appends its row to moves.tsv.
check_size() {
	local drv=$1 gb=$2 name="gc-$1-${2/./_}g" fr=() th=() ok=ok mig=- bytes=0 out pid
	say "$drv, $gb GiB: starting $name on GPU $GPU"
	if pid=$(start_workload "$name" "$gb") && verify "$name" "$gb"; then
		if [[ -z ${FACT[uvm_mapped]:-} ]]; then
			# Whether a process that never asked for managed memory maps the UVM
			# device decides whether that mapping may refuse a freeze
			# (docs/hardware.md, "Supported process kinds").
			if grep -q '/nvidia-uvm$' "/proc/$pid/maps" 2>/dev/null; then set_fact uvm_mapped yes; else set_fact uvm_mapped no; fi
		fi
		if [[ $drv == cli && -z ${FACT[cli_cost_ms]:-} ]]; then
			set_fact cli_cost_ms "$(median_ms "${FACT[cuda_checkpoint]}" --get-state --pid "$pid")"
		fi
		for ((r = 1; r <= ROUNDS; r++)); do
			out=$(move freeze "$name") || { ok=FAIL; fr+=(ERR); break; }
			fr+=("${out% *}"); bytes=${out#* }
			out=$(move thaw "$name") || { ok=FAIL; th+=(ERR); break; }
			th+=("${out% *}")
			verify "$name" "$gb" || ok=FAIL
		done
		if [[ -n ${FACT[other_gpu]:-} && $ok == ok ]]; then
			if out=$(move migrate "$name" --gpu "${FACT[other_gpu]}"); then
				mig=${out% *}
				verify "$name" "$gb" || { ok=FAIL; mig="$mig(FAIL)"; }
			else
				ok=FAIL mig=ERR
			fi
		fi
	else
		ok=FAIL
		note "$drv $gb GiB: the workload did not start or verify (logs.tar.gz: logs/$drv/$name.log)"
	fi
	ctl kill "$name" --grace 10s >/dev/null 2>&1 || true
	local IFS=,
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$drv" "$gb" "$bytes" "${fr[*]:--}" "${th[*]:--}" "$ok" "$mig" >>"$MOVES"
	[[ $ok == ok ]]
}

# ---- phases: each returns 0 passed, 1 failed, 3 skipped (the reason noted),
# 4 out of budget (to be continued by the next call)

indent() { printf '%s\n' "$1" | sed 's/^/  /'; }

phase_preflight() {
	local rc=0 q line cc v crit
	{
		echo "# gpu-check preflight, $(date -u '+%Y-%m-%d %H:%M UTC'), mode ${SET[mode]}"
		echo "host: $(uname -srm); $(nproc) CPUs; $(awk '/MemTotal|MemAvailable/ {printf "%s %d GiB; ", $1, $2 / 1048576}' /proc/meminfo)"
		echo "bundle: $BUNDLE"
		sed 's/^/  /' "$BUNDLE/MANIFEST" 2>/dev/null || echo "  (no MANIFEST)"
	} >"$PRE"
	# The bundle's binaries run here (glibc, loader): without them nothing is checked.
	if ! out=$("$BIN/gpuschedd" --help 2>&1); then
		note "preflight: $BIN/gpuschedd does not run here: $(echo "$out" | tail -n 1)"
		rc=1
	fi
	if ((DRY)); then
		set_fact gpu_name "simulated GPU (gpuschedd --sim 2x80G)"
		set_fact driver_version sim
		set_fact persistence "n/a (simulated)"
		set_fact gpu_count 2
		set_fact other_gpu $((GPU == 0 ? 1 : 0))
		cc=$BUNDLE/sim/cuda-checkpoint
		set_fact pytorch "not used (the dry run's workload is gpusched-simjob --gpu-check)"
		echo "GPUs: simulated, 2 x 80 GiB" >>"$PRE"
	else
		if ! command -v nvidia-smi >/dev/null 2>&1; then
			note "preflight: no NVIDIA GPU: nvidia-smi not found; nothing to check on this machine"
			return 77
		fi
		q=$(nvidia-smi --query-gpu=index,name,uuid,driver_version,persistence_mode,memory.total,memory.used --format=csv,noheader 2>&1) || q=""
		if [[ -z $q || $q != [0-9]* ]]; then
			note "preflight: no NVIDIA GPU: nvidia-smi lists none (${q:-no output})"
			return 77
		fi
		{ echo "nvidia-smi --query-gpu=index,name,uuid,driver_version,persistence_mode,memory.total,memory.used:"
			indent "$q"; echo; indent "$(nvidia-smi 2>&1)"; } >>"$PRE"
		line=$(echo "$q" | awk -F', ' -v g="$GPU" '$1 == g')
		[[ -n $line ]] || { note "preflight: no GPU with index $GPU (nvidia-smi lists: $(echo "$q" | cut -d, -f1 | tr '\n' ' '))"; return 1; }
		IFS=, read -r _ name _ drv pm total used <<<"${line//, /,}"
		set_fact gpu_name "$name ($total, $used used before the check)"
		set_fact driver_version "$drv"
		set_fact persistence "$pm"
		set_fact gpu_count "$(echo "$q" | wc -l)"
		set_fact other_gpu "$(echo "$q" | cut -d, -f1 | grep -vx "$GPU" | head -n 1 || true)"
		# cuda-checkpoint fails with "operation not permitted" without persistence
		# mode (NVIDIA/cuda-checkpoint#25); a lent machine's settings are left as they are.
		[[ $pm == Enabled ]] || note "persistence mode is $pm on GPU $GPU: cuda-checkpoint may fail (NVIDIA/cuda-checkpoint#25); not changed here (nvidia-smi -pm 1 enables it)"
		cc=$BUNDLE/cuda-checkpoint
		[[ -x $cc ]] || cc=$(command -v cuda-checkpoint 2>/dev/null || true)
		v=$("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "available" if torch.cuda.is_available() else "NOT AVAILABLE", torch.cuda.device_count(), "device(s)")' 2>&1 | tail -n 1) || v="no PyTorch: $v"
		set_fact pytorch "$v"
		echo "PyTorch ($PY): $v" >>"$PRE"
		[[ $v == *" available "* ]] || { note "preflight: $PY has no PyTorch with CUDA: $v"; rc=1; }
		echo "libcuda: $(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}')" >>"$PRE"
	fi
	# cuda-checkpoint: its --help carries the driver's version ("Version 570.86.10"),
	# from libcuda; without libcuda.so.1 the loader refuses to start it.
	set_fact cuda_checkpoint "${cc:-}"
	if [[ -n $cc && -x $cc ]]; then
		out=$("$cc" --help 2>&1) && v=$(echo "$out" | grep -m1 -o 'Version [^ ]*[0-9]' || echo "no version line") || v="--help failed: $(echo "$out" | tail -n 1)"
		{ echo "cuda-checkpoint: $cc: $v"; indent "$out"; } >>"$PRE"
		set_fact cuda_checkpoint_version "$v"
	else
		echo "cuda-checkpoint: none" >>"$PRE"
		set_fact cuda_checkpoint_version none
	fi
	# The drivers to check: api needs the checkpoint entry points of driver 570+.
	local drivers=()
	v=${FACT[driver_version]%%.*}
	if ((DRY)); then
		drivers+=(api)
	elif [[ $v =~ ^[0-9]+$ ]] && ((v >= 570)); then
		drivers+=(api)
	else
		note "api: skipped, driver ${FACT[driver_version]} (the checkpoint API in libcuda needs 570+)"
	fi
	if [[ ${FACT[cuda_checkpoint_version]} == Version* ]]; then drivers+=(cli)
	else note "cli: skipped, no working cuda-checkpoint (${FACT[cuda_checkpoint_version]}; make gpu-check-bundle CUDA_CHECKPOINT=PATH carries one)"; fi
	set_fact drivers "${drivers[*]}"
	((${#drivers[@]} > 0)) || { note "preflight: no checkpoint driver to check"; rc=1; }
	# CRIU for the hibernate phase: the bundle's, else a system criu >= 4.
	crit=$BUNDLE/criu/bin/criu
	[[ -x $crit ]] || crit=$(command -v criu 2>/dev/null || true)
	if [[ -n $crit ]] && out=$("$crit" check 2>&1); then
		set_fact criu "$crit"
		echo "criu: $crit: $("$crit" --version 2>&1 | head -n 1); check: $out" >>"$PRE"
	else
		set_fact criu none
		echo "criu: ${crit:-none}${crit:+: check failed: $out}" >>"$PRE"
		note "hibernate: will be skipped, no working CRIU${crit:+ ($crit check: $(echo "$out" | tail -n 1))}"
	fi
	[[ -z ${FACT[other_gpu]} ]] && note "migrate: skipped, one GPU only"
	return "$rc"
}

# phase_driver DRV: the freeze/thaw phase of one checkpoint driver; sizes
# already in moves.tsv (from an interrupted call) are not run again.
phase_driver() {
	local drv=$1 failed=0 gb
	[[ " ${FACT[drivers]} " == *" $drv "* ]] || { note "$drv: skipped (see preflight)"; return 3; }
	local todo=()
	for gb in "${SIZE_LIST[@]}"; do
		awk -F'\t' -v d="$drv" -v g="$gb" '$1 == d && $2 == g {f = 1} END {exit !f}' "$MOVES" || todo+=("$gb")
	done
	((${#todo[@]})) || return "$(awk -F'\t' -v d="$drv" '$1 == d && $6 != "ok" {f = 1} END {print f ? 1 : 0}' "$MOVES")"
	(($(left) >= $(est_size "${todo[0]}") + 20)) || return 4
	start_daemon "$drv" "$drv" || return 1
	for gb in "${todo[@]}"; do
		(($(left) >= $(est_size "$gb"))) || { stop_daemon; return 4; }
		check_size "$drv" "$gb" || failed=1
	done
	stop_daemon
	awk -F'\t' -v d="$drv" '$1 == d && $6 != "ok" {f = 1} END {exit f}' "$MOVES" || failed=1
	return "$failed"
}

# used_mib: GPU $GPU's total memory in use, all processes.
used_mib() { ctl --json gpus | jq_py "print([g for g in r['gpus'] if g['index']==$GPU][0]['used_mib'])"; }

# settle TARGET CHUNK SECS: until GPU $GPU's usage is within one chunk below
# TARGET; prints the milliseconds it took, or fails.
settle() {
	local t0=${EPOCHREALTIME/./} end=$((SECONDS + $3)) u=-
	while ((SECONDS <= end)); do
		u=$(used_mib) || return 1
		if ((u <= $1 && u + $2 > $1)); then
			echo $(((${EPOCHREALTIME/./} - t0) / 1000))
			return 0
		fi
		sleep 0.2
	done
	note "filler: GPU $GPU holds $u MiB, not within $2 MiB below $1 after $3 s"
	return 1
}

# frow STEP RESULT [SETTLE_MS]: one row of the filler table.
frow() { printf '%s\t%s\t%s\t%s\n' "$1" "$(used_mib 2>/dev/null || echo -)" "${3:--}" "$2" >>"$FRES"; }

# phase_filler: hold 0.9 of the GPU, run a workload allocating 4 GiB in the
# room left, and check that it verifies and the usage returns to target.
phase_filler() {
	local out target chunk ms ok=0 name=gc-filler held
	(($(left) >= 120)) || return 4
	: >"$FRES"
	start_daemon filler none || return 1
	say "filler: holding 0.9 of GPU $GPU"
	if ! out=$(ctl --json fill "$GPU" --ratio 0.9 --detach 2>&1); then
		note "filler: fill failed: $out"
		frow "hold 0.9" FAIL
		stop_daemon
		return 1
	fi
	read -r target chunk <<<"$(echo "$out" | jq_py 'print(r["target_mib"], r["chunk_mib"])')"
	if ms=$(settle "$target" "$chunk" 60); then frow "hold 0.9 (target $target MiB)" ok "$ms"
	else frow "hold 0.9 (target $target MiB)" FAIL; ok=1; fi
	say "filler: a workload allocates 4 GiB beside it"
	if start_workload "$name" 4 >/dev/null && verify "$name" 4; then
		if ms=$(settle "$target" "$chunk" 60); then
			held=$(ctl --json fillers | jq_py "print([f for f in r['fillers'] if f['index']==$GPU][0]['held_mib'])")
			frow "4 GiB workload verified, filler down to $held MiB" ok "$ms"
		else
			frow "4 GiB workload verified, usage not back at the target" FAIL
			ok=1
		fi
	else
		note "filler: the 4 GiB workload did not start or verify beside the filler (logs.tar.gz: logs/filler/$name.log)"
		frow "4 GiB workload" FAIL
		ok=1
	fi
	ctl kill "$name" --grace 10s >/dev/null 2>&1 || true
	if ms=$(settle "$target" "$chunk" 60); then frow "workload ended: back to the target" ok "$ms"
	else frow "workload ended: back to the target" FAIL; ok=1; fi
	ctl unfill "$GPU" >/dev/null || ok=1
	stop_daemon
	return "$ok"
}

# phase_hibernate: the smallest size frozen and dumped to disk with CRIU
# (hibernate), restored from disk (thaw) and verified.
phase_hibernate() {
	local drv gb name out hib=ERR written=0 thaw=ERR ok=FAIL
	[[ ${FACT[criu]} != none ]] || { note "hibernate: skipped, no working CRIU (see logs/preflight.txt in logs.tar.gz)"; return 3; }
	drv=${FACT[drivers]%% *}
	[[ -n $drv ]] || { note "hibernate: skipped, no checkpoint driver"; return 3; }
	gb=$(printf '%s\n' "${SIZE_LIST[@]}" | sort -g | head -n 1)
	(($(left) >= $(est_size "$gb") + 60)) || return 4
	: >"$HRES"
	start_daemon hibernate "$drv" "${FACT[criu]}" || return 1
	name="gc-hib-${gb/./_}g"
	say "hibernate: $drv driver, $gb GiB"
	if start_workload "$name" "$gb" >/dev/null && verify "$name" "$gb"; then
		if out=$(move hibernate "$name"); then
			hib=${out% *} written=${out#* }
			if out=$(move thaw "$name"); then
				thaw=${out% *}
				verify "$name" "$gb" && ok=ok
			fi
		fi
	else
		note "hibernate: the workload did not start or verify (logs.tar.gz: logs/hibernate/$name.log)"
	fi
	ctl kill "$name" --grace 10s >/dev/null 2>&1 || true
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$drv" "$gb" "$hib" "$written" "$thaw" "$ok" >>"$HRES"
	stop_daemon
	[[ $ok == ok ]]
}

# ---- the frozen phase: a user's tree in a cgroup they froze
#
# A user may make a cgroup in the one delegated to them, move their tree
# into it and freeze it (cgroup.freeze). The real cuda-checkpoint hangs
# on a frozen process, its driver threads not running
# (checkpoint-restore/criu#2458, #2470); the daemon watches such a tree
# and fails a freeze or thaw of it at once (docs/hardware.md, "Supported
# process kinds"). This phase checks that on the GPU, then records what
# the tool itself does on the frozen process, action by action.

ZPID="" ZMS="" ZOUT=""

# cg_freeze DIR 0|1: writes DIR's cgroup.freeze and waits until its
# cgroup.events says so.
cg_freeze() {
	echo "$2" >"$1/cgroup.freeze" || return 1
	local end=$((SECONDS + 10))
	until grep -qx "frozen $2" "$1/cgroup.events"; do
		((SECONDS < end)) || { note "frozen: $1 did not reach 'frozen $2' within 10 s"; return 1; }
		sleep 0.05
	done
}

# frozen_thaw, frozen_remove: undo the phase's cgroups and user, also when
# a call ends early (thawed before the daemon stops, removed after); the
# workload runs as root again.
frozen_thaw() { [[ -z $FZ || ! -e $FZ/cgroup.freeze ]] || echo 0 >"$FZ/cgroup.freeze" 2>/dev/null || true; }
frozen_remove() {
	local end=$((SECONDS + 10))
	if [[ -n $FZ_TOP && -d $FZ_TOP ]]; then # the tree's processes may still be exiting
		until find "$FZ_TOP" -depth -type d -exec rmdir {} + 2>/dev/null; [[ ! -d $FZ_TOP ]]; do
			((SECONDS < end)) || { say "frozen: could not remove $FZ_TOP"; break; }
			sleep 0.1
		done
	fi
	[[ -z $FZ_USER ]] || userdel "$FZ_USER" 2>/dev/null || true
	FZ_TOP="" FZ="" FZ_USER=""
	as_root
}

# tree_pids PID: PID and its descendants.
tree_pids() {
	local c kids=()
	echo "$1"
	read -r -a kids < <(cat /proc/"$1"/task/*/children 2>/dev/null | tr '\n' ' ')
	for c in "${kids[@]}"; do tree_pids "$c"; done
}

# zrow WHO STEP MS RESULT DETAIL: one row of frozen.tsv.
zrow() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$ZRES"; }

# fz_ctl OP NAME: root's OP of NAME through the daemon; sets ZMS (its ms)
# and ZOUT (its last line); fails as the call does.
fz_ctl() {
	local t0=${EPOCHREALTIME/./} rc=0
	ZOUT=$(timeout "$(cap 60)" "$BIN/gpuschedctl" --socket "$SOCK" "$@" 2>&1) || rc=$?
	ZMS=$(((${EPOCHREALTIME/./} - t0) / 1000))
	ZOUT=$(echo "$ZOUT" | tail -n 1)
	return "$rc"
}
state_of() { ctl --json status "$1" 2>/dev/null | jq_py 'print(r["state"])' || echo "?"; }

# fz_refused OP NAME WANT: OP while the cgroup is frozen must fail, naming
# cgroup.freeze, and leave the process WANT.
fz_refused() {
	local st
	cg_freeze "$FZ" 1 || return 1
	if fz_ctl "$1" "$2"; then
		zrow daemon "$1, its cgroup frozen" "$ZMS" FAIL "went through: $ZOUT"
		cg_freeze "$FZ" 0
		return 1
	fi
	st=$(state_of "$2")
	cg_freeze "$FZ" 0 || return 1
	if [[ $ZOUT != *cgroup.freeze* || $st != "$3" ]]; then
		zrow daemon "$1, its cgroup frozen" "$ZMS" FAIL "$ZOUT; then $st"
		return 1
	fi
	zrow daemon "$1, its cgroup frozen" "$ZMS" ok "refused: $ZOUT; then $st"
}

# fz_passes OP NAME: OP once the cgroup is thawed goes through.
fz_passes() {
	local cs=""
	[[ -z $cc ]] || cs="; cuda-checkpoint --get-state before: $(timeout 3 "$cc" --get-state --pid "$ZPID" 2>&1 | tail -n 1 || echo "no answer in 3 s")"
	if fz_ctl "$1" "$2"; then zrow daemon "$1, thawed" "$ZMS" ok "then $(state_of "$2")$cs"
	else zrow daemon "$1, thawed" "$ZMS" FAIL "$ZOUT$cs"; return 1; fi
}

# fz_tool ACTION GOAL [ARGS]: cuda-checkpoint --action ACTION on the CUDA
# process while its cgroup is frozen: whether it ends within $HOLD s, how
# long after the thaw it ends, its exit status and last line, the state
# after. Puts the process in GOAL (the action's own result) when the
# action left it elsewhere, so that the next action starts where it should.
fz_tool() {
	local act=$1 goal=$2 t0 t1 tp end rc=0 ended out st
	shift 2
	cg_freeze "$FZ" 1 || return 1
	t0=${EPOCHREALTIME/./}
	timeout 120 "$cc" --action "$act" --pid "$ZPID" "$@" >"$WORK/fz-tool.out" 2>&1 &
	tp=$!
	end=$((t0 + HOLD * 1000000))
	while kill -0 "$tp" 2>/dev/null && ((${EPOCHREALTIME/./} < end)); do sleep 0.05; done
	t1=${EPOCHREALTIME/./}
	kill -0 "$tp" 2>/dev/null && ended="still waiting after $HOLD s frozen" || ended="ended while frozen"
	cg_freeze "$FZ" 0 || return 1
	wait "$tp" || rc=$?
	[[ $ended == ended* ]] || ended="$ended, ended $(((${EPOCHREALTIME/./} - t1) / 1000)) ms after the thaw"
	out=$(tail -n 1 "$WORK/fz-tool.out")
	st=$(timeout 10 "$cc" --get-state --pid "$ZPID" 2>&1 | tail -n 1)
	zrow cuda-checkpoint "--action $act $*" "$(((${EPOCHREALTIME/./} - t0) / 1000))" "$ended; exit $rc" "${out:+$out; }then $st"
	[[ $st == "$goal" ]] || timeout 60 "$cc" --action "$act" --pid "$ZPID" >/dev/null 2>&1 ||
		{ note "frozen: cuda-checkpoint --action $act, the cgroup thawed, failed on $ZPID"; return 1; }
}

# fz_abandoned ACTION UNDO: cuda-checkpoint --action ACTION killed after
# $HOLD s with the process's cgroup frozen, as the daemon ends a call its
# watch gave up on; then thawed: whether the action lands all the same
# (the state within 3 s of the thaw). Where it did, UNDO puts it back.
fz_abandoned() {
	local act=$1 undo=$2 before t0 tp end ended st
	before=$(timeout 10 "$cc" --get-state --pid "$ZPID" 2>&1 | tail -n 1)
	cg_freeze "$FZ" 1 || return 1
	t0=${EPOCHREALTIME/./}
	"$cc" --action "$act" --pid "$ZPID" >"$WORK/fz-tool.out" 2>&1 &
	tp=$!
	end=$((t0 + HOLD * 1000000))
	while kill -0 "$tp" 2>/dev/null && ((${EPOCHREALTIME/./} < end)); do sleep 0.05; done
	if kill -KILL "$tp" 2>/dev/null; then ended="killed after $HOLD s frozen"; else ended="ended while frozen"; fi
	wait "$tp" 2>/dev/null || true
	cg_freeze "$FZ" 0 || return 1
	end=$((${EPOCHREALTIME/./} + 3000000))
	while st=$(timeout 10 "$cc" --get-state --pid "$ZPID" 2>&1 | tail -n 1); [[ $st == "$before" ]] && ((${EPOCHREALTIME/./} < end)); do
		sleep 0.2
	done
	zrow cuda-checkpoint "--action $act, killed" "$(((${EPOCHREALTIME/./} - t0) / 1000))" "$ended" "$before before; $st within 3 s of the thaw"
	[[ $st == "$before" ]] || timeout 60 "$cc" --action "$undo" --pid "$ZPID" >/dev/null 2>&1 ||
		{ note "frozen: cuda-checkpoint --action $undo, to undo a $act that landed, failed"; return 1; }
}

# phase_frozen: the smallest size, run by a user in a cgroup delegated to
# them; its tree moved into a cgroup of theirs that is frozen: the daemon's
# freeze and thaw fail at once and go through once it is thawed; then
# cuda-checkpoint's actions on the frozen process, recorded.
phase_frozen() {
	local gb name=gc-frozen cg2 uid gid ok=0 drv cc="" init from p out
	drv=${FACT[drivers]%% *}
	[[ -n $drv ]] || { note "frozen: skipped, no checkpoint driver"; return 3; }
	[[ ${FACT[cuda_checkpoint_version]} != Version* ]] || cc=${FACT[cuda_checkpoint]}
	gb=$(printf '%s\n' "${SIZE_LIST[@]}" | sort -g | head -n 1)
	(($(left) >= $(est_size "$gb") + 6 * HOLD + 40)) || return 4
	: >"$ZRES"
	cg2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
	[[ -n $cg2 && -e $cg2/cgroup.procs ]] || { note "frozen: skipped, no cgroup2 hierarchy"; return 3; }
	if ! id -u gpucheck >/dev/null 2>&1; then
		useradd --system --no-create-home --shell /usr/sbin/nologin gpucheck 2>/dev/null ||
			{ note "frozen: skipped, could not add the user gpucheck"; return 3; }
		FZ_USER=gpucheck
	fi
	uid=$(id -u gpucheck) gid=$(id -g gpucheck)
	# The user's delegated cgroup, as systemd's Delegate= leaves one: theirs, with its cgroup.procs.
	FZ_TOP=$cg2/gpu-check-frozen.$$
	mkdir -p "$FZ_TOP/user-$uid" "$WORK/u"
	chown "$uid:$gid" "$FZ_TOP/user-$uid" "$FZ_TOP/user-$uid"/cgroup.{procs,subtree_control,threads}
	cp "$BIN/gpuschedctl" "$BIN/gpusched-simjob" "$ROOT/scripts/gpu-check/workload.py" "$WORK/u/"
	chmod 755 "$WORK/u"
	RUNAS=(setpriv --reuid="$uid" --regid="$gid" --clear-groups env -C "$WORK/u" HOME="$WORK/u")
	RUNCTL=$WORK/u/gpuschedctl SIMJOB=$WORK/u/gpusched-simjob WORKLOAD=$WORK/u/workload.py
	if ! "${RUNAS[@]}" test -x "$BIN/gpusched-init"; then # the tree's supervisor runs as its owner
		note "frozen: skipped, the user gpucheck cannot reach $BIN/gpusched-init (a parent directory closed to others)"
		frozen_remove
		return 3
	fi
	if ((!DRY)) && ! out=$("${RUNAS[@]}" "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>&1); then
		note "frozen: skipped, the user gpucheck cannot run $PY with CUDA: $(echo "$out" | tail -n 1)"
		frozen_remove
		return 3
	fi
	start_daemon frozen "$drv" none --user-cgroups "$FZ_TOP/user-%U" --group "$(id -gn gpucheck)" ||
		{ frozen_remove; return 1; }
	say "frozen: $drv driver, $gb GiB, run by gpucheck (uid $uid)"
	if ZPID=$(start_workload "$name" "$gb") && verify "$name" "$gb"; then
		init=$(ctl --json status "$name" | jq_py 'print(r["init_pid"])')
		from=$(sed -n 's/^0:://p' "/proc/$ZPID/cgroup")
		say "frozen: the tree ($(tree_pids "$init" | wc -l) processes) moves from $from into $FZ_TOP/user-$uid/mine"
		FZ=$FZ_TOP/user-$uid/mine
		mkdir "$FZ" && chown "$uid:$gid" "$FZ"
		for p in $(tree_pids "$init"); do echo "$p" >"$FZ/cgroup.procs"; done
		fz_refused freeze "$name" running || ok=1
		fz_passes freeze "$name" || ok=1
		fz_refused thaw "$name" frozen || ok=1
		fz_passes thaw "$name" || ok=1
		verify "$name" "$gb" || ok=1
		if [[ -n $cc ]]; then
			local st t0 rc=0
			cg_freeze "$FZ" 1 || ok=1
			t0=${EPOCHREALTIME/./}
			st=$(timeout 5 "$cc" --get-state --pid "$ZPID" 2>&1 | tail -n 1) || rc=$?
			cg_freeze "$FZ" 0 || ok=1
			zrow cuda-checkpoint "--get-state" "$(((${EPOCHREALTIME/./} - t0) / 1000))" \
				"$( ((rc == 124)) && echo "no answer: killed after 5 s" || echo "exit $rc")" "$st"
			fz_abandoned lock unlock &&
				fz_tool lock locked --timeout 5000 &&
				fz_tool checkpoint checkpointed &&
				fz_abandoned restore checkpoint &&
				fz_tool restore locked &&
				fz_tool unlock running || ok=1
			verify "$name" "$gb" || ok=1
		else
			note "frozen: cuda-checkpoint's own actions not recorded: no working cuda-checkpoint"
		fi
	else
		note "frozen: the workload did not start or verify (logs.tar.gz: logs/frozen/$name.log)"
		ok=1
	fi
	frozen_thaw
	ctl kill "$name" --grace 10s >/dev/null 2>&1 || true
	stop_daemon
	frozen_remove
	return "$ok"
}

# report: report.md from the state and the result files, also on stdout.
# phase_util: a busy and an idle workload on GPU $GPU: each one's own
# utilization as gpus shows it, then both given the idle policy, which
# must freeze the idle one and leave the busy one running.
phase_util() {
	local busy=gc-util-busy idle=gc-util-idle ok=0 u ub ui st end=$((SECONDS + 30))
	(($(left) >= 120)) || return 4
	[[ " ${FACT[drivers]} " == *" api "* ]] || { note "util: skipped: no api driver (see preflight)"; return 3; }
	start_daemon util api || return 1
	if start_workload "$busy" 0.25 busy >/dev/null && start_workload "$idle" 0.25 >/dev/null; then
		sleep 3 # a few of the daemon's GPU samples (one a second) of each at work or idle
		u=$(ctl --json gpus | jq_py "g = [g for g in r['gpus'] if g['index'] == $GPU][0]
p = {x.get('managed'): x.get('util_percent', 'unknown') for x in g['processes']}
print(p.get('$busy', 'absent'), p.get('$idle', 'absent'), g.get('util_percent', 'unknown'))") || u="- - -"
		read -r ub ui _ <<<"$u"
		set_fact proc_util "$u"
		say "util: busy $ub%, idle $ui%, GPU ${u##* }%"
		[[ $ub =~ ^[0-9]+$ && $ub -gt 0 && $ui == 0 ]] || { note "util: busy $ub%, idle $ui% (want above 0, and 0)"; ok=1; }
		if ! ctl set "$busy" --idle 2s >/dev/null || ! ctl set "$idle" --idle 2s >/dev/null; then
			note "util: set --idle failed"
			ok=1
		fi
		st=running
		# freezing is on its way: the policy's freeze runs beside the loop
		while ((SECONDS < end)) && [[ $st == running || $st == freezing ]]; do
			sleep 0.5
			st=$(ctl --json status "$idle" | jq_py 'print(r["state"])') || st=-
		done
		u="idle $st, busy $(ctl --json status "$busy" | jq_py 'print(r["state"])' || echo -)"
		set_fact idle_policy "$u"
		say "util: after --idle 2s on both: $u"
		[[ $u == "idle frozen, busy running" ]] || { note "util: after --idle 2s on both: $u (want idle frozen, busy running)"; ok=1; }
	else
		note "util: a workload did not start (logs.tar.gz: logs/util/)"
		ok=1
	fi
	ctl kill "$busy" --grace 10s >/dev/null 2>&1 || true
	ctl kill "$idle" --grace 10s >/dev/null 2>&1 || true
	stop_daemon
	return "$ok"
}

report() {
	local phases=() p s
	for p in "${PHASES[@]}"; do
		s=$(awk -F'\t' -v p="$p" '$1 == "phase" && $2 == p {s = $3 " " ($4 == "" ? "" : $4 " s") ($6 == "" ? "" : ", " $6)} END {print s}' "$STATE")
		phases+=("$p: ${s:-not run}")
	done
	"$PY" - "$OUTDIR" "${SET[mode]}" "$GPU" "$ROUNDS" "${phases[@]}" >"$OUTDIR/report.md.tmp" <<'EOF'
import os, statistics, sys
out, mode, gpu, rounds = sys.argv[1:5]
phases = sys.argv[5:]
fact, notes = {}, []
for line in open(os.path.join(out, "state.tsv")):
    f = line.rstrip("\n").split("\t")
    if f[0] == "fact" and len(f) >= 3:
        fact[f[1]] = f[2]
    elif f[0] == "note" and len(f) >= 2 and f[1] not in notes:
        notes.append(f[1])
FLOOR = 20.0  # ms per GB: ~50 GB/s host link per direction (H100/H200)

def rows(name):
    p = os.path.join(out, name)
    return [l.rstrip("\n").split("\t") for l in open(p) if l.strip()] if os.path.exists(p) else []

def table(cols, body, right):
    t = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" if i in right else "---" for i in range(len(cols))) + "|"]
    return t + ["| " + " | ".join(r) + " |" for r in body]

def med(csv):  # median of the rounds that worked; "ERR" when none did
    v = [float(x) for x in csv.split(",") if x not in ("-", "ERR")]
    return statistics.median(v) if v else ("ERR" if "ERR" in csv else None)

def f(v, fmt="%.1f"):
    return v if isinstance(v, str) else "-" if v is None else fmt % v

print("# gpusched hardware check" + (" (DRY RUN: simulated GPUs, fake cuda-checkpoint and libcuda)" if mode == "dry-run" else ""))
print()
print("- GPU %s: %s; driver %s; %s GPU(s); persistence mode %s" % (gpu, fact.get("gpu_name", "?"),
      fact.get("driver_version", "?"), fact.get("gpu_count", "?"), fact.get("persistence", "?")))
print("- gpusched %s; cuda-checkpoint %s; PyTorch %s" % (fact.get("gpusched", "?"),
      fact.get("cuda_checkpoint_version", "?"), fact.get("pytorch", "?")))
if fact.get("cli_cost_ms"):
    print("- cuda-checkpoint --get-state start cost: %s ms (median of 5); the cli driver pays one per step "
          "(lock, checkpoint, restore, unlock), the api driver none" % fact["cli_cost_ms"])
if fact.get("uvm_mapped"):
    print("- the workload (no managed memory) maps /dev/nvidia-uvm: %s" % fact["uvm_mapped"])
if fact.get("proc_util"):
    print("- util phase, each process's own utilization (gpus' util_percent): busy workload %s%%, idle workload %s%%, the GPU %s%%"
          % tuple((fact["proc_util"].split() + ["-"] * 3)[:3]))
if fact.get("idle_policy"):
    print("- util phase, --idle 2s on both: %s" % fact["idle_policy"])
print("- %s freeze/thaw rounds per size; phases: %s" % (rounds, "; ".join(phases)))
for n in notes:
    print("- note: " + n)

body = []
for drv, gb, nbytes, fr, th, ok, mig in rows("moves.tsv"):
    fz, tw = med(fr), med(th)
    gbytes = int(nbytes) / 1e9 if int(nbytes) > 0 else float(gb) * 1.073741824
    per = (fz + tw) / (2 * gbytes) if isinstance(fz, float) and isinstance(tw, float) else None
    body.append([drv, gb, f(int(nbytes) / 2**30 if int(nbytes) else None, "%.2f"), f(fz), f(tw),
                 f(per), f(per / FLOOR if per else None, "%.2f"), ok, mig])
print("\n## Freeze and thaw\n")
print("\n".join(table(["driver", "GiB", "moved GiB", "freeze ms", "thaw ms", "ms/GB", "x floor", "verify", "migrate ms"],
                      body, {1, 2, 3, 4, 5, 6, 8})))
print("\nms/GB = (freeze + thaw) / (2 x GB moved as the driver reports it, 1 GB = 1e9 bytes); x floor = ms/GB / %g" % FLOOR)
print("\n## Filler on GPU %s (fill --ratio 0.9; settle = until usage is within one chunk below the target)\n" % gpu)
print("\n".join(table(["step", "GPU used MiB", "settle ms", "result"], rows("filler.tsv"), {1, 2})))
print("\n## Hibernate (CRIU dump of the frozen process, thaw from disk)\n")
hb = [[d, g, h, "%.2f" % (int(w) / 2**30), t, ok] for d, g, h, w, t, ok in rows("hibernate.tsv")]
print("\n".join(table(["driver", "GiB", "hibernate ms", "written GiB", "thaw ms", "verify"], hb, {1, 2, 3, 4})))
print("\n## A user's tree in a cgroup they froze (cgroup.freeze; each cuda-checkpoint action held frozen, then thawed)\n")
print("\n".join(table(["who", "step", "ms", "result", "detail"], rows("frozen.tsv"), {2})))
EOF
	mv "$OUTDIR/report.md.tmp" "$OUTDIR/report.md"
	cat "$OUTDIR/report.md"
}

# ---- run

if [[ $PHASE_ARG == all ]]; then
	for p in "${PHASES[@]}"; do
		case $(status "$p") in ok | failed | skipped) ;; *) RUN+=("$p") ;; esac
	done
fi
if ((${#RUN[@]})) && [[ ${RUN[0]} != preflight && $(status preflight) != ok ]]; then
	RUN=(preflight "${RUN[@]}") # every phase stands on the preflight's facts
fi
say "results in $OUTDIR; phases to run: ${RUN[*]:-none}; budget $BUDGET s"
reap_leftovers
FAILED=0 LEFT=() GONE=0
for p in "${RUN[@]}"; do
	if ((GONE)); then LEFT+=("$p"); continue; fi
	if [[ $p != preflight && $(status preflight) != ok ]]; then
		mark "$p" skipped 0 "the preflight did not pass"
		continue
	fi
	# A phase run again from the start drops its earlier rows.
	if [[ $PHASE_ARG != all || $(status "$p") != started ]]; then
		case $p in
		api | cli) awk -F'\t' -v d="$p" '$1 != d' "$MOVES" >"$MOVES.tmp" && mv "$MOVES.tmp" "$MOVES" ;;
		esac
	fi
	say "phase $p: start ($(left) s of the budget left)"
	mark "$p" started
	t=$SECONDS rc=0 LASTNOTE=
	case $p in
	preflight) phase_preflight || rc=$? ;;
	api | cli) phase_driver "$p" || rc=$? ;;
	filler) phase_filler || rc=$? ;;
	hibernate) phase_hibernate || rc=$? ;;
	frozen) phase_frozen || rc=$? ;;
	util) phase_util || rc=$? ;;
	esac
	case $rc in
	0) mark "$p" ok $((SECONDS - t)) ;;
	3) mark "$p" skipped $((SECONDS - t)) "$LASTNOTE" ;;
	4) say "phase $p: left for the next call (the budget has $(left) s)"; LEFT+=("$p"); GONE=1 ;;
	77) mark "$p" failed $((SECONDS - t)) "no NVIDIA GPU"; save_logs; report >/dev/null; exit 77 ;;
	*) mark "$p" failed $((SECONDS - t)) "$LASTNOTE"; FAILED=1 ;;
	esac
	say "phase $p: $(status "$p")"
	save_logs
done
report
if ((${#LEFT[@]})); then
	say "phases left for the next call: ${LEFT[*]} (run the same command with --from this call's results)"
	exit 75
fi
for p in "${PHASES[@]}"; do [[ $(status "$p") != failed ]] || FAILED=1; done
((FAILED == 0)) || die "some checks FAILED (see report.md and progress.log in $OUTDIR)"
say "all phases done and passed"
