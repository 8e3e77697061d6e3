#!/usr/bin/env bash
# gpu-check_test.sh: the hardware check's dry run (make test-gpu-check): builds
# a bundle with make gpu-check-bundle, then runs scripts/gpu-check.sh --dry-run
# on simulated GPUs across two calls, as on a lent machine: phases resumed
# from the first call's results, a phase cut short continued by size, a
# budget too small leaving phases for the next call, an injected
# cuda-checkpoint failure reported as FAIL, bad usage changing nothing, and
# the frozen phase's daemon and tool rows.
# Needs root (the daemon runs processes as their callers) and CRIU for the
# hibernate phase (make test-deps installs it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d /tmp/gpu-check-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
chmod 755 "$T" # the frozen phase's user runs the bundle's supervisor
CHECK=$ROOT/scripts/gpu-check.sh
B=$T/bundle
t0=$SECONDS

fail() { echo "gpu-check_test: FAIL: $*" >&2; exit 1; }
# run RC ARGS...: scripts/gpu-check.sh with ARGS must exit RC; its output goes to $T/out.
run() {
	local want=$1 rc=0
	shift
	"$CHECK" --bundle "$B" "$@" >"$T/out" 2>&1 || rc=$?
	((rc == want)) || { cat "$T/out" >&2; fail "gpu-check.sh $* exited $rc, want $want"; }
	echo "gpu-check_test: $((SECONDS - t0)) s: gpu-check.sh ${*#--bundle "$B"} exited $rc"
}
# rows FILE REGEX: how many lines of FILE match REGEX.
rows() { grep -cE -- "$2" "$1" || true; }
st() { awk -F'\t' -v p="$2" '$1 == "phase" && $2 == p {s = $3} END {print s}' "$1/state.tsv"; }

make --no-print-directory -s -C "$ROOT" gpu-check-bundle GPU_CHECK_BUNDLE="$B" >"$T/out" 2>&1 ||
	{ cat "$T/out" >&2; fail "make gpu-check-bundle failed"; }
[[ -x $B/bin/gpuschedd && -x $B/sim/cuda-checkpoint && -f $B/sim/libcuda.so.1 && -f $B/MANIFEST ]] ||
	fail "make gpu-check-bundle left an incomplete bundle: $(ls -R "$B")"

# Call 1, as on a lent machine: --from the bundle's empty results/, the
# preflight and the api phase only.
run 0 --dry-run --from "$B/results" --out "$T/o1" --sizes "1 2" --rounds 2 --phase preflight,api
[[ $(st "$T/o1" preflight) == ok && $(st "$T/o1" api) == ok && -z $(st "$T/o1" cli) ]] ||
	fail "call 1 states: $(cat "$T/o1/state.tsv")"
(($(rows "$T/o1/moves.tsv" $'^api\t(1|2)\t[0-9]+\t[^\t]+,[^\t]+\t[^\t]+,[^\t]+\tok\t[0-9.]+$') == 2)) ||
	fail "call 1: want two api rows, each with 2 rounds, verified, migrated: $(cat "$T/o1/moves.tsv")"
grep -q '^| api | 2 | 2.00 |' "$T/o1/report.md" || fail "call 1 report: $(cat "$T/o1/report.md")"
for f in state.tsv moves.tsv progress.log logs.tar.gz report.md; do
	[[ -s $T/o1/$f ]] || fail "call 1 wrote no $f"
done
tar -tzf "$T/o1/logs.tar.gz" | grep -q '^logs/api/gc-api-2g.log$' || fail "logs.tar.gz lacks the workload's log"
tar -tzf "$T/o1/logs.tar.gz" | grep -q '^logs/preflight.txt$' || fail "logs.tar.gz lacks the preflight's findings"
(($(find "$T/o1" -type f | wc -l) <= 8)) || fail "more files than a device call brings back: $(ls "$T/o1")"

# Bad usage writes nothing: a setting other than the one recorded, an unknown phase.
before=$(cd "$T/o1" && sha256sum ./*)
run 2 --out "$T/o1" --sizes "4"
run 2 --dry-run --out "$T/o9" --phase api,bogus
[[ $before == "$(cd "$T/o1" && sha256sum ./*)" && ! -e $T/o9 ]] || fail "bad usage changed the results"

# Call 2 continues call 1 from the files brought back into results/: the
# phases left, not the ones done.
cp "$T/o1"/* "$B/results/"
run 0 --from "$B/results" --out "$T/o2"
for p in preflight api cli filler hibernate frozen util; do [[ $(st "$T/o2" "$p") == ok ]] || fail "call 2: $p is $(st "$T/o2" "$p")"; done
# The util phase: the busy workload's own utilization (simjob --util 60),
# the idle one's 0, the GPU's 60; the idle policy freezes the idle one only.
if ! grep -q $'^fact\tproc_util\t60 0 60$' "$T/o2/state.tsv" || ! grep -q $'^fact\tidle_policy\tidle frozen, busy running$' "$T/o2/state.tsv"; then
	fail "call 2: the util phase's facts $(grep -E 'proc_util|idle_policy' "$T/o2/state.tsv")"
fi
(($(rows "$T/o2/state.tsv" $'^phase\tapi\tstarted') == 1)) || fail "call 2 ran the api phase again"
(($(rows "$T/o2/moves.tsv" $'^cli\t.*\tok\t') == 2)) || fail "call 2: cli rows $(cat "$T/o2/moves.tsv")"
(($(rows "$T/o2/hibernate.tsv" $'^api\t1\t[0-9.]+\t[1-9][0-9]*\t[0-9.]+\tok$') == 1)) ||
	fail "call 2: hibernate row $(cat "$T/o2/hibernate.tsv")"
(($(rows "$T/o2/filler.tsv" $'\tok$') == 3)) || fail "call 2: filler rows $(cat "$T/o2/filler.tsv")"
# The frozen phase: the daemon refuses a freeze and a thaw while a user's
# cgroup is frozen and does both once it is thawed; the fake tool's actions
# wait on the frozen process, and one killed meanwhile does not land.
(($(rows "$T/o2/frozen.tsv" $'^daemon\t.*\tok\t') == 4)) || fail "call 2: frozen rows $(cat "$T/o2/frozen.tsv")"
(($(rows "$T/o2/frozen.tsv" $'^daemon\t[a-z]+, its cgroup frozen\t.*\trefused: .*cgroup.freeze') == 2)) ||
	fail "call 2: the daemon's refusals $(cat "$T/o2/frozen.tsv")"
(($(rows "$T/o2/frozen.tsv" $'^cuda-checkpoint\t--action [a-z]+ .*still waiting after 2 s frozen, ended [0-9]+ ms after the thaw; exit 0') == 4)) ||
	fail "call 2: the tool's actions on a frozen process $(cat "$T/o2/frozen.tsv")"
(($(rows "$T/o2/frozen.tsv" $'^cuda-checkpoint\t--action [a-z]+, killed\t.*\t(running|checkpointed) before; \\1 within') == 2)) ||
	fail "call 2: a killed action landed $(cat "$T/o2/frozen.tsv")"
! id -u gpucheck >/dev/null 2>&1 || fail "the frozen phase left its user gpucheck"
if ! grep -q '^| api | 1 |' "$T/o2/report.md" || ! grep -q '^| cli | 2 |' "$T/o2/report.md"; then
	fail "call 2 report: $(cat "$T/o2/report.md")"
fi

# A call killed in the cli phase after its 1 GiB size: the next call runs only the 2 GiB one.
mkdir "$T/o3" && cp "$T/o2"/* "$T/o3/"
printf 'phase\tcli\tstarted\t\t-\t\n' >>"$T/o3/state.tsv"
grep -v $'^cli\t2\t' "$T/o2/moves.tsv" >"$T/o3/moves.tsv"
n=$(wc -l <"$T/o3/progress.log")
run 0 --out "$T/o3" --from "$T/o1" # --from is not used: o3 holds results
tail -n +$((n + 1)) "$T/o3/progress.log" >"$T/o3.log"
if (($(rows "$T/o3.log" 'phase .*: start') != 1)) || ! grep -q 'phase cli: start' "$T/o3.log"; then
	fail "the resumed call ran more than the cli phase: $(cat "$T/o3.log")"
fi
(($(rows "$T/o3/moves.tsv" $'^cli\t1\t') == 1 && $(rows "$T/o3/moves.tsv" $'^cli\t2\t.*\tok\t') == 1)) ||
	fail "resumed cli phase: $(cat "$T/o3/moves.tsv")"
! grep -q 'gc-cli-1g' "$T/o3.log" || fail "the resumed cli phase ran its 1 GiB size again"

# A budget that fits no phase leaves them all for the next call.
run 75 --dry-run --out "$T/o4" --budget 1 --phase api
[[ $(st "$T/o4" api) == started ]] || fail "budget 1: api is $(st "$T/o4" api)"

# A thaw that fails in cuda-checkpoint is a failed check, not a pass.
printf '{"restore": {"error": "CUDA_ERROR_UNKNOWN"}}\n' >"$B/sim/faults.json"
run 1 --dry-run --out "$T/o5" --sizes 1 --rounds 1 --phase cli
rm "$B/sim/faults.json"
if [[ $(st "$T/o5" cli) != failed ]] || (($(rows "$T/o5/moves.tsv" $'^cli\t1\t.*\tFAIL\t') != 1)); then
	fail "injected restore failure: $(cat "$T/o5/moves.tsv")"
fi
grep -q '| FAIL |' "$T/o5/report.md" || fail "the report does not show the failure"

# Without --dry-run on a machine without a GPU: the preflight says so, exit 77.
if ! command -v nvidia-smi >/dev/null; then
	run 77 --out "$T/o6"
	if [[ $(st "$T/o6" preflight) != failed ]] || ! grep -q 'no NVIDIA GPU' "$T/o6/report.md"; then
		fail "no GPU: $(cat "$T/o6/state.tsv")"
	fi
fi

# The hardware preflight reads what nvidia-smi and PyTorch print on a lent
# H100 (stand-ins here, printing what they print there: docs/hardware.md).
mkdir -p "$T/stub/torch"
cat >"$T/stub/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in
*--query-gpu=*) echo "0, NVIDIA H100 80GB HBM3, GPU-0b7e0000-0000-0000-0000-000000000000, 580.159.04, Disabled, 81559 MiB, 1 MiB" ;;
*) echo "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |" ;;
esac
SH
chmod +x "$T/stub/nvidia-smi"
cat >"$T/stub/torch/__init__.py" <<'PY'
__version__ = "2.11.0+cu130"
class version:
    cuda = "13.0"
class cuda:
    is_available = staticmethod(lambda: True)
    device_count = staticmethod(lambda: 1)
PY
PATH=$T/stub:$PATH PYTHONPATH=$T/stub run 0 --out "$T/o7" --phase preflight
for want in $'fact\tdriver_version\t580.159.04$' $'fact\tpersistence\tDisabled$' $'fact\tgpu_count\t1$' \
	$'fact\tother_gpu\t$' $'fact\tgpu_name\tNVIDIA H100 80GB HBM3 \\(81559 MiB, 1 MiB used' \
	$'fact\tpytorch\t2.11.0\\+cu130 CUDA 13.0 available 1 device' $'fact\tdrivers\tapi' \
	$'note\tpersistence mode is Disabled' $'phase\tpreflight\tok'; do
	grep -qE -- "^$want" "$T/o7/state.tsv" || fail "hardware preflight: no '$want' in $(cat "$T/o7/state.tsv")"
done

echo "gpu-check_test: ok ($((SECONDS - t0)) s)"
