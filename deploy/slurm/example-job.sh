#!/usr/bin/env bash
#SBATCH --job-name=gpusched-example
#SBATCH --nodes=1
#SBATCH --time=01:00:00
# A batch script that runs its GPU work under gpuschedd and follows Slurm's
# suspend and resume (scontrol suspend/resume, PreemptMode=SUSPEND,GANG):
# on suspend its processes are frozen (their GPU memory moves into host RAM
# and the GPUs are free), on resume they are thawed. See
# deploy/slurm/README.md ("Preemption") for what this can and cannot do.
#
# Replace the two commands and their GPU memory with yours (or set
# POLICY_CMD and REWARD_CMD, split on spaces, and POLICY_VRAM and
# REWARD_VRAM, as deploy/slurm's tests do); they run as the managed
# processes slurm-$SLURM_JOB_ID-policy and slurm-$SLURM_JOB_ID-reward, in
# this directory, with this environment. They are queued (gpusched-slurm
# submit), not started at once: under gang scheduling or preemption this
# job may start while a job Slurm is suspending still holds the GPU, and
# gpuschedd starts them once that job's memory is frozen. The job lasts
# until both have exited; its exit status is 0 only if both exited 0.
set -euo pipefail

read -r -a policy <<<"${POLICY_CMD:-python3 policy.py}"
read -r -a reward <<<"${REWARD_CMD:-python3 reward.py}"

gpusched-slurm submit policy --vram "${POLICY_VRAM:-16G}" -- "${policy[@]}"
gpusched-slurm submit reward --vram "${REWARD_VRAM:-4G}" -- "${reward[@]}"

# Slurm suspends a job by sending SIGTSTP to its steps, then SIGSTOP after
# PreemptParameters=suspend_grace_time (2 s by default); it resumes with
# SIGCONT. Neither reaches the managed processes, which are gpuschedd's
# children, not the job's: these traps freeze and thaw them. A trap runs
# between commands, so the script waits with the `wait` builtin, which a
# trapped signal interrupts at once.
trap 'gpusched-slurm suspend || echo "gpusched: suspend failed; the processes keep their GPUs" >&2' TSTP
trap 'gpusched-slurm resume || echo "gpusched: resume failed; see gpusched-slurm ps" >&2' CONT

gpusched-slurm wait &
waiter=$!
while :; do
	status=0
	wait "$waiter" || status=$?
	# gpusched-slurm exits 0, 1 or 2: above 128, a trapped signal
	# interrupted the wait (and its trap has run). Wait again, unless the
	# waiter ended meanwhile: then one more wait gives its status.
	((status > 128)) || break
	if ! kill -0 "$waiter" 2>/dev/null; then
		status=0
		wait "$waiter" || status=$?
		break
	fi
done
exit "$status"
