#!/usr/bin/env bash
# Slurm Prolog for nodes where gpuschedd runs under systemd (slurm.conf:
# Prolog=/etc/slurm/gpusched/prolog.sh). Runs as root before a job starts
# on this node:
#   - checks that gpuschedd answers on its socket; when it does not, exits
#     non-zero, and Slurm drains the node and requeues the job;
#   - ends what is left alive from an earlier run of the same job id (a
#     requeued job keeps its id, and its processes' names would clash):
#     processes of $SLURM_JOB_USER named slurm-$SLURM_JOB_ID-*;
#   - records the job's start in the system log.
#
# Environment: SLURM_JOB_ID and SLURM_JOB_USER (set by slurmd);
# GPUSCHED_SOCKET; GPUSCHEDCTL and GPUSCHED_SLURM (default: beside this
# script, else on PATH).
set -euo pipefail

export PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

log() {
	echo "gpusched prolog: $*" >&2
	if command -v logger >/dev/null; then
		logger -t gpusched-slurm -- "prolog: $*" 2>/dev/null || true
	fi
}

if [[ -z ${SLURM_JOB_ID:-} || -z ${SLURM_JOB_USER:-} ]]; then
	log "SLURM_JOB_ID and SLURM_JOB_USER must be set (this script is Slurm's Prolog)"
	exit 1
fi

here=$(dirname -- "${BASH_SOURCE[0]}")
ctl=${GPUSCHEDCTL:-}
if [[ -z $ctl ]]; then
	ctl=$(command -v gpuschedctl) || ctl=/usr/local/bin/gpuschedctl
fi
helper=${GPUSCHED_SLURM:-}
if [[ -z $helper ]]; then
	helper=$here/gpusched-slurm
	[[ -x $helper ]] || helper=$(command -v gpusched-slurm) || helper=/usr/local/bin/gpusched-slurm
fi
for f in "$ctl" "$helper"; do
	if [[ ! -x $f ]]; then
		log "job $SLURM_JOB_ID: $f not found or not executable (set GPUSCHEDCTL / GPUSCHED_SLURM)"
		exit 1
	fi
done

if ! out=$("$ctl" --connect-timeout 10s version 2>&1); then
	log "job $SLURM_JOB_ID: gpuschedd does not answer on ${GPUSCHED_SOCKET:-/run/gpusched/gpusched.sock}: ${out//$'\n'/; } (systemctl status gpuschedd)"
	exit 1
fi

export GPUSCHEDCTL=$ctl
if ! out=$("$helper" --job "$SLURM_JOB_ID" --user "$SLURM_JOB_USER" kill 2>&1); then
	log "job $SLURM_JOB_ID ($SLURM_JOB_USER): leftovers of an earlier run: ${out//$'\n'/; }"
	exit 1
fi
case $out in
*"no process of job"*) ;;
*) log "job $SLURM_JOB_ID ($SLURM_JOB_USER): ended leftovers of an earlier run: ${out//$'\n'/; }" ;;
esac
log "job $SLURM_JOB_ID ($SLURM_JOB_USER) starts; gpuschedd answers"
