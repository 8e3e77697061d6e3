#!/usr/bin/env bash
# Slurm Epilog for nodes where gpuschedd runs under systemd (slurm.conf:
# Epilog=/etc/slurm/gpusched/epilog.sh). Runs as root when a job ends on
# this node: ends every live gpusched process of the job, that is every
# process of $SLURM_JOB_USER named slurm-$SLURM_JOB_ID-* (see
# deploy/slurm/README.md). Nothing else is touched: other jobs' processes,
# unprefixed processes, leases, fillers and queued jobs stay as they are.
#
# A non-zero exit makes Slurm drain the node: it does so when the daemon
# cannot be asked or a process of the job is still alive afterwards.
#
# Environment: SLURM_JOB_ID and SLURM_JOB_USER (set by slurmd);
# GPUSCHED_SOCKET; GPUSCHED_KILL_GRACE (TERM to KILL, default the daemon's
# --kill-grace); GPUSCHED_SLURM (the gpusched-slurm helper, default the one
# beside this script, else on PATH).
set -euo pipefail

# slurmd gives its scripts a minimal environment.
export PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

log() {
	echo "gpusched epilog: $*" >&2
	if command -v logger >/dev/null; then
		logger -t gpusched-slurm -- "epilog: $*" 2>/dev/null || true
	fi
}

if [[ -z ${SLURM_JOB_ID:-} || -z ${SLURM_JOB_USER:-} ]]; then
	log "SLURM_JOB_ID and SLURM_JOB_USER must be set (this script is Slurm's Epilog)"
	exit 1
fi

helper=${GPUSCHED_SLURM:-}
if [[ -z $helper ]]; then
	helper=$(dirname -- "${BASH_SOURCE[0]}")/gpusched-slurm
	[[ -x $helper ]] || helper=$(command -v gpusched-slurm) || helper=/usr/local/bin/gpusched-slurm
fi
if [[ ! -x $helper ]]; then
	log "job $SLURM_JOB_ID: gpusched-slurm not found (set GPUSCHED_SLURM); the job's processes were not ended"
	exit 1
fi

args=(--job "$SLURM_JOB_ID" --user "$SLURM_JOB_USER" kill)
if [[ -n ${GPUSCHED_KILL_GRACE:-} ]]; then
	args+=(--grace "$GPUSCHED_KILL_GRACE")
fi
if ! out=$("$helper" "${args[@]}" 2>&1); then
	log "job $SLURM_JOB_ID ($SLURM_JOB_USER): ${out//$'\n'/; }"
	exit 1
fi
if [[ -n $out ]]; then
	log "job $SLURM_JOB_ID ($SLURM_JOB_USER): ${out//$'\n'/; }"
fi
