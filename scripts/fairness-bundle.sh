#!/bin/bash
# Builds into DIR (default fairness-bundle) what the fairness benchmarks
# (BenchmarkFairness, BenchmarkRefusedConnection) need on a machine
# without Go, such as a lent GPU host: the daemon's binaries, the fake
# cuda-checkpoint, fairload and the daemon package's compiled tests, all
# stripped and packed in bundle.tar.gz (25 MiB: with the working tree it
# fits what a device call carries, 64 MiB), and run.sh, which runs them
# there as root:
#
#	DIR/run.sh [-test.bench NAME] [more d.test flags]
#
# (default: BenchmarkFairness once, verbose), and runs.sh, which runs it
# in turns within a time budget (for a device call). run.sh unpacks the
# bundle into a fresh directory under /tmp that the benchmark's users can
# reach, runs there (give paths in flags absolute) and removes it;
# $GPUSCHED_TEST_BINARIES set names other binaries (another build's
# daemon). Checked on the development VM from a directory outside the
# checkout.
set -euo pipefail
out=$(realpath -m "${1:-fairness-bundle}")
cd "$(dirname "$0")/.."
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin/fake"
flags=(-trimpath -ldflags '-s -w')
go build "${flags[@]}" -o "$stage/bin/" ./cmd/gpuschedd ./cmd/gpusched-init ./cmd/gpuschedctl ./cmd/gpusched-simjob ./cmd/gpusched-router
go build "${flags[@]}" -o "$stage/bin/fake/cuda-checkpoint" ./internal/checkpoint/checkpointtest/cuda-checkpoint
go build "${flags[@]}" -o "$stage/bin/fairload" ./internal/testutil/fairload
go test -c "${flags[@]}" -o "$stage/d.test" ./internal/daemon
rm -rf "$out"
mkdir -p "$out"
tar -czf "$out/bundle.tar.gz" -C "$stage" bin d.test
cat > "$out/run.sh" <<'RUN'
#!/bin/sh
# Runs a fairness benchmark from this bundle, as root (it creates its users),
# in a fresh directory under /tmp that those users can reach.
set -e
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/gpusched-fairness.XXXXXX)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
tar -xzf "$here/bundle.tar.gz" -C "$dir"
case " $* " in *" -test.bench "*) ;; *) set -- -test.bench BenchmarkFairness "$@" ;; esac
cd "$dir"
GPUSCHED_TEST_BINARIES="${GPUSCHED_TEST_BINARIES:-$dir/bin}" ./d.test -test.run '^$' -test.benchtime 1x -test.v "$@"
RUN
cat > "$out/runs.sh" <<'RUNS'
#!/bin/sh
# Runs BenchmarkFairness again and again for at most SECONDS, taking the
# variants in turn (each a string of run.sh arguments, shell-quoted; ""
# for the defaults), each run under $RUN_LIMIT s (default 200); writes
# each run's output to DIR/rN.log and its start and end to
# DIR/progress.txt, after what the kernel's scheduler is there. A failed
# run ends the turns. On a device call:
#
#	.fairness/runs.sh "$OUT" 540 "-fairness.sched" "-fairness.sched -fairness.daemon='--cpu-slice 0'"
here=$(cd "$(dirname "$0")" && pwd)
out=$1 budget=$2 limit=${RUN_LIMIT:-200}
shift 2
[ $# -gt 0 ] || set -- ""
{ # what the kernel's scheduler is: preemption model, tick, CPUs, cgroups
	uname -r
	dmesg 2>/dev/null | grep -m1 'Dynamic Preempt' || :
	zcat /proc/config.gz 2>/dev/null | grep -E '^CONFIG_(HZ|PREEMPT[A-Z_]*)=' | tr '\n' ' ' || :
	echo
	echo "$(nproc) CPUs; $(stat -fc %T /sys/fs/cgroup)"
	# which CPUs share a last-level cache: a woken thread is looked for an
	# idle CPU only among those (select_idle_sibling)
	for c in /sys/devices/system/cpu/cpu[0-9]*; do
		l=$(ls -d "$c"/cache/index* 2>/dev/null | tail -n 1)
		[ -n "$l" ] && cat "$l/shared_cpu_list"
	done | sort -u | tr '\n' ' ' | sed 's/^/last-level caches: /'
	echo
	echo "autogroup $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null)"
} >> "$out/progress.txt"
start=$(date +%s)
n=0
while :; do
	for v in "$@"; do
		[ $(($(date +%s) - start + limit)) -le "$budget" ] || exit 0
		n=$((n + 1))
		echo "r$n $(date -u +%T) $v" >> "$out/progress.txt"
		eval "timeout $limit \"\$here/run.sh\" $v" > "$out/r$n.log" 2>&1
		rc=$?
		echo "r$n rc=$rc $(date -u +%T)" >> "$out/progress.txt"
		[ $rc -eq 0 ] || exit $rc
	done
done
RUNS
chmod 755 "$out" "$out/run.sh" "$out/runs.sh"
du -sh "$out"
