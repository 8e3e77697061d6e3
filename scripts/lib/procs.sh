# shellcheck shell=bash
# procs.sh: /proc helpers shared by the CRIU scripts (sourced, not run).

# pid_busy PID: true while PID is used by a process, process group or session
# (criu restore cannot re-create it until then: "Can't fork for PID: File
# exists"). Orphans are reaped by PID 1, which can take a while.
pid_busy() {
	local id=$1 f line rest pgrp sess
	[[ -e /proc/$id ]] && return 0
	for f in /proc/[0-9]*/stat; do
		{ read -r line <"$f"; } 2>/dev/null || continue
		rest=${line##*) }
		read -r _ _ pgrp sess _ <<<"$rest"
		[[ $pgrp == "$id" || $sess == "$id" ]] && return 0
	done
	return 1
}

# proc_state PID: one-letter state of PID, empty when gone.
proc_state() {
	local line
	{ read -r line <"/proc/$1/stat"; } 2>/dev/null || return 0
	line=${line##*) }
	printf '%s\n' "${line%% *}"
}
