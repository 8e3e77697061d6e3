#!/usr/bin/env bash
# test-deps.sh: install what the test suite needs, idempotently and quickly
# when it is already there: Go modules, socat, Debian's python3-pytest (and
# venv, wheel and mypy for the SDK's packaging tests) and
# CRIU >= 4 (scripts/install-criu.sh), Slurm and MUNGE. Needs root for the packages.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v socat >/dev/null || need+=(socat)
/usr/bin/python3 -c 'import pytest' 2>/dev/null || need+=(python3-pytest)
# The SDK's packaging test: pip install into a venv, offline (Debian's setuptools and wheel), and mypy --strict.
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
/usr/bin/python3 -c 'import setuptools, wheel' 2>/dev/null || need+=(python3-setuptools python3-wheel)
/usr/bin/python3 -c 'import mypy' 2>/dev/null || need+=(python3-mypy)
command -v shellcheck >/dev/null || need+=(shellcheck) # lints the install and Slurm scripts
command -v gcc >/dev/null || need+=(gcc) # builds the fake libcuda for the driver-API tests
command -v tmux >/dev/null || need+=(tmux) # a real terminal for the dashboard's tests
# A real Slurm cluster for deploy/slurm's tests (internal/slurmtest).
for p in slurmctld:/usr/sbin/slurmctld slurmd:/usr/sbin/slurmd slurm-client:/usr/bin/sbatch munge:/usr/sbin/munged; do
	[[ -x ${p#*:} ]] || need+=("${p%%:*}")
done
if ((${#need[@]})); then
	echo "test-deps: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -q "${need[@]}" >/dev/null 2>&1 ||
		{ apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; }
fi
go mod download
(cd deploy/k8s && go mod download)
scripts/install-criu.sh >/dev/null
echo "test-deps: ok (go $(go env GOVERSION), $(socat -V | sed -n 's/^socat version \([^ ]*\).*/socat \1/p'), pytest $(/usr/bin/python3 -m pytest --version 2>&1 | awk '{print $2}'), $(scripts/install-criu.sh --print-path))" >&2
