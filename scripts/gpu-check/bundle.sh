#!/usr/bin/env bash
# bundle.sh DIR: build into DIR everything scripts/gpu-check.sh needs on a GPU
# machine that has neither Go nor a network (`make gpu-check-bundle` runs it;
# docs/hardware.md says how DIR travels):
#
#   DIR/bin/         gpuschedd (cgo, for go-nvml), gpusched-init, gpuschedctl, gpusched-simjob
#   DIR/cuda-checkpoint
#                    NVIDIA's tool, when $CUDA_CHECKPOINT names it
#   DIR/criu/        the private CRIU copy (scripts/install-criu.sh), when
#                    installed here, with a wrapper that runs from any place
#   DIR/sim/         the fake cuda-checkpoint and fake libcuda.so.1, for --dry-run
#   DIR/MANIFEST     what is in DIR, its size and what the binaries need
#   DIR/results/     where the results a device call brought back go, for
#                    the next call's --from (kept when DIR is rebuilt)
#
# Fails
# when DIR would not leave room for the working tree in a device call's
# 64 MiB. Env: LDFLAGS (the Makefile's -X flags), CUDA_CHECKPOINT,
# GPU_CHECK_CRIU (a CRIU prefix; default /opt/gpusched/criu; none: leave out).
set -euo pipefail

die() { echo "gpu-check-bundle: $*" >&2; exit 1; }
if (($# != 1)) || [[ -z $1 ]]; then die "usage: bundle.sh DIR"; fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$1
CRIU_PREFIX=${GPU_CHECK_CRIU:-/opt/gpusched/criu}
# The device call carries the working tree and DIR in 64 MiB together.
LIMIT_MIB=64

command -v gcc >/dev/null || die "gcc is needed: gpuschedd links go-nvml through cgo"
if [[ -n ${CUDA_CHECKPOINT:-} ]]; then
	[[ -f $CUDA_CHECKPOINT && -x $CUDA_CHECKPOINT ]] || die "CUDA_CHECKPOINT=$CUDA_CHECKPOINT: not an executable file"
fi
mkdir -p "$DIR"
rm -rf "${DIR:?}/bin" "$DIR/sim" "$DIR/criu" "$DIR/cuda-checkpoint" "$DIR/MANIFEST"
mkdir -p "$DIR/bin" "$DIR/sim" "$DIR/results"
# A file, so that the directory travels even before any results are in it.
[[ -e $DIR/results/README ]] || echo "Copy here the files a device call of scripts/gpu-check.sh brought back (docs/hardware.md)." >"$DIR/results/README"

cd "$ROOT"
CGO_ENABLED=1 go build -trimpath -ldflags "${LDFLAGS:-} -s -w" -o "$DIR/bin/" \
	./cmd/gpuschedd ./cmd/gpusched-init ./cmd/gpuschedctl ./cmd/gpusched-simjob
go version -m "$DIR/bin/gpuschedd" | grep -q 'CGO_ENABLED=1' || die "gpuschedd was built without cgo"
go build -trimpath -ldflags "-s -w" -o "$DIR/sim/cuda-checkpoint" ./internal/checkpoint/checkpointtest/cuda-checkpoint
gcc -shared -fPIC -fvisibility=hidden -O2 -Wall -Werror -o "$DIR/sim/libcuda.so.1" \
	internal/checkpoint/checkpointtest/libcuda/fake_libcuda.c
[[ -z ${CUDA_CHECKPOINT:-} ]] || install -m 0755 "$CUDA_CHECKPOINT" "$DIR/cuda-checkpoint"

# CRIU: the private copy, less its manual pages, and a wrapper that finds the
# tree beside itself (install-criu.sh's wrapper names /opt/gpusched/criu).
if [[ $CRIU_PREFIX != none && -x $CRIU_PREFIX/usr/sbin/criu ]]; then
	loader=$(cd "$CRIU_PREFIX" && find usr/lib -maxdepth 2 -name 'ld-linux-*.so.*' | sort | head -n 1)
	[[ -n $loader ]] || die "no dynamic loader under $CRIU_PREFIX/usr/lib"
	mkdir -p "$DIR/criu/bin"
	cp -a "$CRIU_PREFIX/usr" "$CRIU_PREFIX/etc" "$DIR/criu/"
	rm -rf "$DIR/criu/usr/share"
	cat >"$DIR/criu/bin/criu" <<EOF
#!/bin/sh
# CRIU from the gpu-check bundle: the tree beside this file, started through
# its own loader (as scripts/install-criu.sh's wrapper does) from any place.
p=\$(dirname "\$(readlink -f "\$0")")/..
exec "\$p/$loader" --inhibit-cache --library-path "\$p/$(dirname "$loader")" --argv0 "\$0" "\$p/usr/sbin/criu" "\$@"
EOF
	chmod 0755 "$DIR/criu/bin/criu"
fi

mib() { du -sm "$@" | awk '{s += $1} END {print s}'; }
size=$(mib "$DIR/bin" "$DIR/sim" "$DIR"/criu "$DIR"/cuda-checkpoint 2>/dev/null || true)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | awk '{print int($1 / 1048576) + 1}')
glibc=$(objdump -T "$DIR/bin/gpuschedd" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1 || true)
{
	echo "gpu-check bundle of $(git describe --tags --always --dirty 2>/dev/null || echo unknown), built $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m)"
	echo "size: $size MiB; with the working tree ($tree MiB): $((size + tree)) of $LIMIT_MIB MiB a device call carries"
	echo "gpuschedd: cgo (go-nvml), needs ${glibc:-an unknown} glibc or newer"
	if [[ -e $DIR/cuda-checkpoint ]]; then echo "cuda-checkpoint: $CUDA_CHECKPOINT (sha256 $(sha256sum "$DIR/cuda-checkpoint" | cut -c1-16))"
	else echo "cuda-checkpoint: none (the machine's own on PATH is used; make gpu-check-bundle CUDA_CHECKPOINT=PATH adds one)"; fi
	if [[ -d $DIR/criu ]]; then echo "criu: $("$DIR/criu/bin/criu" --version 2>/dev/null | head -n 1) from $CRIU_PREFIX"
	else echo "criu: none (the hibernate phase is skipped unless the machine has criu >= 4)"; fi
	for f in "$DIR"/bin/* "$DIR"/sim/* "$DIR"/criu/bin/criu "$DIR"/cuda-checkpoint; do
		[[ ! -f $f ]] || printf '  %9d %s\n' "$(stat -c %s "$f")" "${f#"$DIR"/}"
	done
} >"$DIR/MANIFEST"
cat "$DIR/MANIFEST" >&2
((size + tree <= LIMIT_MIB)) || die "$DIR ($size MiB) and the working tree ($tree MiB) exceed the $LIMIT_MIB MiB a device call carries (GPU_CHECK_CRIU=none leaves CRIU out)"
