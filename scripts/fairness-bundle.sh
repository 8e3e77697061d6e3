#!/bin/bash
# Builds into DIR (default fairness-bundle) what the fairness benchmarks
# (BenchmarkFairness, BenchmarkRefusedConnection) need on a machine
# without Go, such as a lent GPU host: the daemon's binaries, the fake
# cuda-checkpoint, fairload and the daemon package's compiled tests, all
# stripped, and run.sh, which runs them there as root:
#
#	DIR/run.sh [-test.bench NAME] [more d.test flags]
#
# (default: BenchmarkFairness once, verbose). Checked on the development VM
# from a directory outside the checkout.
set -euo pipefail
out=$(realpath -m "${1:-fairness-bundle}")
cd "$(dirname "$0")/.."
rm -rf "$out"
mkdir -p "$out/bin/fake"
flags=(-trimpath -ldflags '-s -w')
go build "${flags[@]}" -o "$out/bin/" ./cmd/gpuschedd ./cmd/gpusched-init ./cmd/gpuschedctl ./cmd/gpusched-simjob ./cmd/gpusched-router
go build "${flags[@]}" -o "$out/bin/fake/cuda-checkpoint" ./internal/checkpoint/checkpointtest/cuda-checkpoint
go build "${flags[@]}" -o "$out/bin/fairload" ./internal/testutil/fairload
go test -c "${flags[@]}" -o "$out/d.test" ./internal/daemon
cat > "$out/run.sh" <<'RUN'
#!/bin/sh
# Runs a fairness benchmark from this bundle, as root (it creates its users).
dir=$(cd "$(dirname "$0")" && pwd)
case " $* " in *" -test.bench "*) ;; *) set -- -test.bench BenchmarkFairness "$@" ;; esac
chmod 755 "$dir" "$dir/bin"
cd "$dir" && GPUSCHED_TEST_BINARIES="$dir/bin" exec ./d.test -test.run '^$' -test.benchtime 1x -test.v "$@"
RUN
chmod 755 "$out" "$out/run.sh"
du -sh "$out"
