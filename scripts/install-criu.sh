#!/usr/bin/env bash
# install-criu.sh: make CRIU >= 4.0 available to gpusched, idempotently.
#
# Usage:
#   scripts/install-criu.sh [--print-path] [--force] [--verify] [--no-system]
#                           [--print-mirror]
#
#   (no option)   ensure CRIU is there; stdout gets two lines:
#                   criu: <path> (<version>)
#                   <path>
#                 so `scripts/install-criu.sh | tail -1` is the path to use.
#   --print-path  same, but stdout gets only <path>.
#   --force       reinstall the private copy even when it looks fine.
#   --verify      also run the dump/restore smoke test when already installed.
#   --no-system   ignore a system criu; always use the private copy.
#   --print-mirror
#                 print the Debian mirror URI an install would use and exit.
#   -h, --help    this text.
#
#   Progress and errors go to stderr. Exit status: 0 ok, 1 failure, 2 bad usage.
#   <path> is what go-criu's SetCriuPath gets and what people run by hand.
#
# What it does:
#   1. If a system criu (on PATH, or /usr/sbin, /usr/local/sbin, /sbin) has
#      version >= 4.0 and `criu check` passes, print its path and stop.
#   2. If the private copy is installed (stamp file written by this script,
#      wrapper present, `criu check` passes), print its path and stop. This is
#      the fast path (about 0.1 s). Callers that are not root get the path
#      after `criu --version` only (`criu check` needs root).
#   3. Otherwise (root only) install a private copy: Debian 12's own criu
#      (3.17) fails on this kernel's vDSO, so take criu 4.x from Debian 13
#      ("trixie") and unpack it, with the libraries it needs, into a private
#      prefix. Nothing is installed with dpkg and the system's libc and apt
#      state are left alone:
#      - mirror: the URI of the first enabled `deb` entry whose suite is this
#        system's codename (e.g. bookworm) in the files apt reads
#        (Dir::Etc::sourcelist and Dir::Etc::sourceparts: normally
#        /etc/apt/sources.list, /etc/apt/sources.list.d/*.list in one-line
#        format and *.sources in deb822 format). Failing that, a
#        <codename>-updates entry, then stable/testing/trixie; -security
#        archives are never used. GPUSCHED_CRIU_MIRROR overrides it. The
#        Debian archive keyring signs trixie (debian-archive-keyring).
#      - packages: apt itself, run with a private configuration (only
#        "<mirror> trixie main", private lists/cache/archives and an EMPTY dpkg
#        status file, system hooks cleared), resolves the full Depends closure
#        of `criu` (no Recommends) and downloads it with
#        `apt-get install --download-only`. Because the status file is empty,
#        the closure includes libc6 and everything else criu links against,
#        all from trixie, so the trixie loader and libc always match.
#      - unpack: every .deb is extracted with `dpkg-deb -x` into a staging
#        directory next to the prefix; then the loader is asked to resolve
#        criu's libraries (`ld.so --list`) and every one must come from the
#        staging tree; `criu --version` and `criu check` must pass, and a
#        real dump/restore of a `setsid sleep` process must work. Only then
#        is the staging tree renamed into place and the stamp written.
#   4. The wrapper <prefix>/bin/criu runs trixie's loader on the real binary:
#        exec <prefix>/usr/lib/<triplet>/ld-linux-*.so.* --inhibit-cache \
#             --library-path <prefix>/usr/lib/<triplet> --argv0 <wrapper> \
#             <prefix>/usr/sbin/criu "$@"
#      The library path is a loader option, not LD_LIBRARY_PATH, so programs
#      that criu starts (action scripts, iptables, restored processes) never
#      see the trixie libraries.
#
# Environment:
#   GPUSCHED_CRIU_PREFIX  private prefix (default /opt/gpusched/criu); an
#                         absolute path of [A-Za-z0-9._/+-] characters.
#   GPUSCHED_CRIU_MIRROR  Debian mirror URI to use instead of the one found in
#                         the apt sources (for machines with unusual setups).
#   GPUSCHED_CRIU_SUITE   Debian suite to take criu from (default trixie, or
#                         forky on Linux 6.16 and later: see default_suite).
#
# Prefix layout after install:
#   <prefix>/bin/criu              the wrapper (the path to use)
#   <prefix>/usr/sbin/criu         the real trixie binary
#   <prefix>/usr/lib/<triplet>/    trixie loader, libc and the other libraries
#   <prefix>/etc/                  config files shipped by the libraries
#   <prefix>/.gpusched-criu        stamp: recipe, version, mirror, packages
#   <prefix>/.gpusched-criu-owned  marker: this script may replace the tree
#   <parent>/.<name>.lock          flock(1) lock serializing installs
#   Nothing else is written outside a temporary directory that is removed.
#
# Requirements: bash, apt-get, dpkg-deb, flock, setsid (all in Debian's base
# system). Installing requires root; the fast path does not.
set -euo pipefail

readonly RECIPE=1 # bump when the install recipe changes; forces a reinstall
readonly PROG=install-criu
readonly DEFAULT_PREFIX=/opt/gpusched/criu
readonly MIN_MAJOR=4

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# ---------------------------------------------------------------- options
print_path_only=0
print_mirror=0
force=0
verify=0
use_system=1
while (($#)); do
	case $1 in
	--print-path) print_path_only=1 ;;
	--print-mirror) print_mirror=1 ;;
	--force) force=1 ;;
	--verify) verify=1 ;;
	--no-system) use_system=0 ;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		printf '%s: unknown option %q (see --help)\n' "$PROG" "$1" >&2
		exit 2
		;;
	esac
	shift
done

prefix=${GPUSCHED_CRIU_PREFIX:-$DEFAULT_PREFIX}
prefix=${prefix%/}
[[ $prefix =~ ^/[A-Za-z0-9._/+-]+$ ]] ||
	die "GPUSCHED_CRIU_PREFIX must be an absolute path of [A-Za-z0-9._/+-] characters, got '$prefix'"
[[ /$prefix/ != */../* && /$prefix/ != */./* ]] ||
	die "GPUSCHED_CRIU_PREFIX must not contain . or .. components, got '$prefix'"
[[ $(dirname "$prefix") != / ]] ||
	die "GPUSCHED_CRIU_PREFIX must be at least two levels deep (e.g. $DEFAULT_PREFIX), got '$prefix'"
# default_suite: trixie's CRIU 4.1.1, but on Linux 6.16 and later forky's
# CRIU 4.2: 6.16 restricted SO_PASSCRED to Unix and netlink sockets, and
# CRIU before 4.2 then fails to dump any process with a network socket
# (criu#2718, fixed by criu commit 4b7398595).
default_suite() {
	local major minor
	IFS=.- read -r major minor _ <<<"$(uname -r)"
	if [[ $major =~ ^[0-9]+$ && $minor =~ ^[0-9]+$ ]] && ((major > 6 || (major == 6 && minor >= 16))); then
		echo forky
	else
		echo trixie
	fi
}
suite=${GPUSCHED_CRIU_SUITE:-$(default_suite)}
[[ $suite =~ ^[a-z][a-z0-9-]*$ ]] || die "GPUSCHED_CRIU_SUITE looks wrong: '$suite'"

readonly wrapper=$prefix/bin/criu
readonly stamp=$prefix/.gpusched-criu

# ---------------------------------------------------------------- helpers

# criu_version CRIU: print "X.Y[.Z]" from `CRIU --version`, or fail.
criu_version() {
	local out
	out=$("$1" --version 2>/dev/null) || return 1
	out=$(sed -n 's/^Version:[[:space:]]*\([0-9][0-9.]*\).*/\1/p' <<<"$out" | head -n1)
	[[ -n $out ]] || return 1
	printf '%s\n' "$out"
}

# version_ok VERSION: true when the major version is >= MIN_MAJOR.
version_ok() { [[ ${1%%.*} =~ ^[0-9]+$ ]] && ((${1%%.*} >= MIN_MAJOR)); }

# criu_check CRIU: `criu check` passes (needs root).
criu_check() { "$1" check >/dev/null 2>&1; }

# finish PATH VERSION: print the result in the documented format and exit 0.
finish() {
	if ((print_path_only)); then
		log "criu: $1 ($2)"
		printf '%s\n' "$1"
	else
		printf 'criu: %s (%s)\n%s\n' "$1" "$2" "$1"
	fi
	exit 0
}

is_root() { [[ $(id -u) == 0 ]]; }

# ---------------------------------------------------------------- smoke test

smoke_pid=''
smoke_dir=''
smoke_cleanup() {
	if [[ -n $smoke_pid ]] && kill -0 "$smoke_pid" 2>/dev/null; then
		kill -KILL "$smoke_pid" 2>/dev/null || true
	fi
	smoke_pid=''
	if [[ -n $smoke_dir ]]; then rm -rf -- "$smoke_dir"; fi
	smoke_dir=''
}

# shellcheck source-path=SCRIPTDIR source=lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"

# log_tail FILE: the last lines of a CRIU log, for error messages.
log_tail() { if [[ -f $1 ]]; then tail -n 15 -- "$1" >&2; fi; }

# smoke_test CRIU: dump a `setsid sleep` process (killing it), restore it
# detached, check it runs again, kill it.
smoke_test() {
	local criu=$1 i comm st
	smoke_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpusched-criu-smoke.XXXXXX")
	mkdir -m 0700 "$smoke_dir/img"
	# A new session with stdio away from any tty: no --shell-job needed.
	# Other inherited descriptors are closed: the install lock (fd 9) would
	# make the dump fail ("file locks are held"), and sockets from our caller
	# could not be dumped. A background subshell is not a process group
	# leader, so setsid does not fork and $! is the sleeping process.
	(
		cd / || exit 1
		for fd in /proc/"$BASHPID"/fd/*; do
			fd=${fd##*/}
			if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
		done
		exec setsid sleep 1000 </dev/null >/dev/null 2>&1
	) &
	smoke_pid=$!
	# Still our child and reaped by bash, but without a "Killed" job notice.
	disown "$smoke_pid"
	for ((i = 0; i < 100; i++)); do
		comm=$(cat "/proc/$smoke_pid/comm" 2>/dev/null || true)
		[[ $comm == sleep ]] && break
		sleep 0.05
	done
	[[ $comm == sleep ]] || die "smoke test: could not start 'setsid sleep' (pid $smoke_pid is '$comm')"

	if ! "$criu" dump -t "$smoke_pid" -D "$smoke_dir/img" -o dump.log -v2 >/dev/null 2>&1; then
		log_tail "$smoke_dir/img/dump.log"
		die "smoke test: criu dump of pid $smoke_pid failed (log above)"
	fi
	# The dump killed it; wait until bash has reaped it and nothing uses its
	# pid as a process group or session id any more.
	for ((i = 0; i < 200; i++)); do
		pid_busy "$smoke_pid" || break
		sleep 0.05
	done
	if ! "$criu" restore -D "$smoke_dir/img" -d -o restore.log -v2 >/dev/null 2>&1; then
		log_tail "$smoke_dir/img/restore.log"
		die "smoke test: criu restore of pid $smoke_pid failed (log above)"
	fi
	st=$(proc_state "$smoke_pid")
	comm=$(cat "/proc/$smoke_pid/comm" 2>/dev/null || true)
	[[ $comm == sleep && -n $st && $st != Z && $st != X ]] ||
		die "smoke test: restored pid $smoke_pid is not a live sleep (comm '$comm', state '$st')"
	kill -KILL "$smoke_pid" 2>/dev/null || true
	for ((i = 0; i < 200; i++)); do
		st=$(proc_state "$smoke_pid")
		[[ -z $st || $st == Z || $st == X ]] && break
		sleep 0.05
	done
	smoke_pid=''
	smoke_cleanup
	log "smoke test passed: dumped and restored a process with $criu"
}

# ---------------------------------------------------------------- apt sources

# list_apt_entries: print "URI SUITE SIGNED-BY" for every enabled `deb` entry
# (SIGNED-BY is "-" when absent or not a file path). The files are the ones
# apt reads (Dir::Etc::sourcelist and Dir::Etc::sourceparts, normally
# /etc/apt/sources.list and /etc/apt/sources.list.d/{*.list,*.sources}).
list_apt_entries() {
	local f apt_sourcelist='' apt_sourceparts=''
	local -a onel=() d822=()
	eval "$(apt-config shell apt_sourcelist Dir::Etc::sourcelist/f apt_sourceparts Dir::Etc::sourceparts/d)"
	if [[ -n $apt_sourcelist && -f $apt_sourcelist ]]; then onel+=("$apt_sourcelist"); fi
	if [[ -n $apt_sourceparts ]]; then
		for f in "${apt_sourceparts%/}"/*.list; do if [[ -f $f ]]; then onel+=("$f"); fi; done
		for f in "${apt_sourceparts%/}"/*.sources; do if [[ -f $f ]]; then d822+=("$f"); fi; done
	fi
	if ((${#onel[@]})); then
		# deb [opt=val ...] URI SUITE COMPONENT...
		awk '
			{ sub(/#.*/, "") }
			$1 != "deb" { next }
			{
				i = 2; sb = "-"
				if ($i ~ /^\[/) {
					while (i <= NF) {
						o = $i; gsub(/[][]/, "", o)
						if (o ~ /^signed-by=/) { sb = substr(o, 11) }
						if ($i ~ /\]$/) break
						i++
					}
					i++
				}
				if (i + 1 <= NF) print $i, $(i + 1), sb
			}' "${onel[@]}"
	fi
	if ((${#d822[@]})); then
		awk '
			function flush(   n, m, a, b, U, S) {
				if (types ~ /(^|[ \t])deb([ \t]|$)/ && tolower(enabled) != "no" && uris != "" && suites != "") {
					n = split(uris, U, /[ \t]+/); m = split(suites, S, /[ \t]+/)
					for (a = 1; a <= n; a++) for (b = 1; b <= m; b++)
						if (U[a] != "" && S[b] != "") print U[a], S[b], (signed ~ /^\// ? signed : "-")
				}
				types = uris = suites = enabled = signed = key = ""
			}
			FNR == 1 { flush() }
			/^#/ { next }
			/^[ \t]*$/ { flush(); next }
			/^[ \t]/ {
				# continuation line of a folded field
				v = $0; gsub(/^[ \t]+|[ \t]+$/, "", v)
				if (key == "types") types = types " " v
				else if (key == "uris") uris = uris " " v
				else if (key == "suites") suites = suites " " v
				next
			}
			{
				c = index($0, ":"); if (c == 0) next
				key = tolower(substr($0, 1, c - 1)); v = substr($0, c + 1)
				gsub(/^[ \t]+|[ \t]+$/, "", v)
				if (key == "types") types = v
				else if (key == "uris") uris = v
				else if (key == "suites") suites = v
				else if (key == "enabled") enabled = v
				else if (key == "signed-by") signed = v
			}
			END { flush() }' "${d822[@]}"
	fi
}

# resolve_mirror: set mirror (a Debian archive URI without trailing slash) and
# keyring (a keyring file for signed-by=, or "-").
resolve_mirror() {
	local codename='' entries pass uri esuite sb
	mirror=''
	keyring='-'
	if [[ -n ${GPUSCHED_CRIU_MIRROR:-} ]]; then
		mirror=$GPUSCHED_CRIU_MIRROR
		log "using mirror from GPUSCHED_CRIU_MIRROR: $mirror"
	else
		if [[ -r /etc/os-release ]]; then
			codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release | tr -d "\"'")
		fi
		entries=$(list_apt_entries)
		# Prefer the entry for the base suite (bookworm), then a non-security
		# suite of this release (bookworm-updates), then stable, testing or
		# the target suite itself.
		for pass in base updates stable; do
			while read -r uri esuite sb; do
				[[ -n $uri ]] || continue
				case $uri in cdrom:* | *debian-security*) continue ;; esac
				case $pass in
				base) [[ -n $codename && $esuite == "$codename" ]] || continue ;;
				updates) [[ -n $codename && $esuite == "$codename"-* && $esuite != *security* ]] || continue ;;
				stable) [[ $esuite == stable || $esuite == testing || $esuite == "$suite" ]] || continue ;;
				esac
				mirror=$uri
				keyring=$sb
				break 2
			done <<<"$entries"
		done
		[[ -n $mirror ]] || die "no Debian mirror found in the apt sources (no enabled 'deb' entry with suite '${codename:-?}' in sources.list, sources.list.d/*.list or *.sources); set GPUSCHED_CRIU_MIRROR to a Debian mirror URI"
		log "using Debian mirror from the apt sources: $mirror (suite $suite)"
	fi
	mirror=${mirror%/}
	if [[ $keyring == - || ! -f $keyring ]]; then
		keyring=-
		if [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
			keyring=/usr/share/keyrings/debian-archive-keyring.gpg
		fi
	fi
}

if ((print_mirror)); then
	resolve_mirror
	printf '%s\n' "$mirror"
	exit 0
fi

work=''
staging=''
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
	smoke_cleanup
	if [[ -n $staging && -d $staging ]]; then rm -rf -- "$staging"; fi
	if [[ -n $work ]]; then rm -rf -- "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- 1. system criu

# Resolve symlinks so that a link to our own wrapper is not taken for a
# system criu.
own_wrapper=$(readlink -f -- "$wrapper" 2>/dev/null || printf '%s' "$wrapper")

if ((use_system)); then
	declare -A seen=()
	for cand in "$(command -v criu 2>/dev/null || true)" /usr/sbin/criu /usr/local/sbin/criu /sbin/criu; do
		[[ -n $cand && -x $cand ]] || continue
		real=$(readlink -f -- "$cand")
		[[ $real != "$own_wrapper" && $real != "$prefix"/* && -z ${seen[$real]:-} ]] || continue
		seen[$real]=1
		ver=$(criu_version "$cand") || continue
		if ! version_ok "$ver"; then
			log "ignoring system $cand: version $ver < $MIN_MAJOR.0"
			continue
		fi
		if ! is_root; then
			log "using system $cand ($ver) without running 'criu check' (not root)"
			finish "$cand" "$ver"
		fi
		if criu_check "$cand"; then
			if ((verify)); then smoke_test "$cand"; fi
			finish "$cand" "$ver"
		fi
		log "ignoring system $cand ($ver): 'criu check' fails"
	done
fi

# ---------------------------------------------------------------- 2. fast path

# installed_ok: the private copy is complete and working; prints its version.
installed_ok() {
	local ver rec
	[[ -f $stamp && -x $wrapper ]] || return 1
	rec=$(sed -n 's/^recipe=//p' "$stamp")
	[[ $rec == "$RECIPE" ]] || return 1
	[[ $(sed -n 's/^suite=//p' "$stamp") == "$suite" ]] || return 1 # e.g. forky wanted since a kernel upgrade
	ver=$(criu_version "$wrapper") || return 1
	version_ok "$ver" || return 1
	if is_root; then criu_check "$wrapper" || return 1; fi
	printf '%s\n' "$ver"
}

if ((!force)) && ver=$(installed_ok); then
	log "already installed in $prefix"
	if ((verify)); then
		is_root || die "--verify needs root"
		smoke_test "$wrapper"
	fi
	finish "$wrapper" "$ver"
fi

# ---------------------------------------------------------------- 3. install

is_root || die "CRIU >= $MIN_MAJOR.0 is not installed and installing it needs root: run 'sudo $0'"
for tool in apt-get apt-config dpkg dpkg-deb flock setsid mktemp; do
	command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found; this installer needs a Debian-based system"
done

arch=$(dpkg --print-architecture)
case $arch in
amd64)
	triplet=x86_64-linux-gnu
	loader_name=ld-linux-x86-64.so.2
	;;
arm64)
	triplet=aarch64-linux-gnu
	loader_name=ld-linux-aarch64.so.1
	;;
*) die "unsupported architecture '$arch' (supported: amd64, arm64)" ;;
esac

parent=$(dirname "$prefix")
mkdir -p -- "$parent"
# One installer at a time (tests may run several packages in parallel).
lockfile=$parent/.$(basename "$prefix").lock
exec 9>"$lockfile"
if ! flock -n 9; then
	log "waiting for another install-criu run (lock $lockfile)"
	flock -w 900 9 || die "timed out waiting for lock $lockfile"
fi
# Another run may have finished while we waited.
if ((!force)) && ver=$(installed_ok); then
	log "installed by a concurrent run in $prefix"
	finish "$wrapper" "$ver"
fi

if [[ -e $prefix && ! -f $stamp ]] && [[ -n $(ls -A -- "$prefix" 2>/dev/null) ]]; then
	# Never delete a directory this script did not create.
	[[ -f $prefix/.gpusched-criu-owned ]] ||
		die "$prefix exists and was not created by this script; remove it or set GPUSCHED_CRIU_PREFIX"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpusched-criu.XXXXXX")
resolve_mirror

# ---- 3b. private apt state: resolve and download criu's dependency closure

mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/cache" \
	"$work/sources.list.d" "$work/preferences.d"
: >"$work/status"
if [[ $keyring == - ]]; then
	printf 'deb %s %s main\n' "$mirror" "$suite" >"$work/sources.list"
else
	printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$mirror" "$suite" >"$work/sources.list"
fi
{
	# Read after the system's apt.conf.d, so it overrides it while keeping
	# proxies, timeouts and the like.
	printf 'Dir::Etc::sourcelist "%s";\n' "$work/sources.list"
	printf 'Dir::Etc::sourceparts "%s";\n' "$work/sources.list.d"
	printf 'Dir::Etc::preferences "%s";\n' "$work/preferences"
	printf 'Dir::Etc::preferencesparts "%s";\n' "$work/preferences.d"
	printf 'Dir::State::Lists "%s";\n' "$work/lists"
	printf 'Dir::State::status "%s";\n' "$work/status"
	printf 'Dir::State::extended_states "%s";\n' "$work/extended_states"
	printf 'Dir::Cache "%s";\n' "$work/cache"
	printf 'Dir::Cache::archives "%s";\n' "$work/archives"
	printf 'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n'
	printf 'APT::Architecture "%s";\n' "$arch"
	printf '#clear APT::Architectures;\nAPT::Architectures { "%s"; };\n' "$arch"
	printf 'APT::Default-Release "";\n'
	printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
	printf 'APT::Sandbox::User "root";\n'
	printf 'Acquire::Languages "none";\n'
	# No hooks of the system's apt (cache cleaners, PackageKit, appstream).
	printf '#clear APT::Update::Pre-Invoke;\n#clear APT::Update::Post-Invoke;\n'
	printf '#clear APT::Update::Post-Invoke-Success;\n#clear DPkg::Pre-Invoke;\n'
	printf '#clear DPkg::Post-Invoke;\n#clear DPkg::Pre-Install-Pkgs;\n'
	# Only the Packages indices (no DEP-11, Contents, ...).
	apt-config dump 2>/dev/null |
		sed -n 's/^Acquire::IndexTargets::deb::\([^:]*\)::MetaKey .*/\1/p' | sort -u |
		while read -r target; do
			[[ $target == Packages ]] ||
				printf 'Acquire::IndexTargets::deb::%s::DefaultEnabled "false";\n' "$target"
		done
} >"$work/apt.conf"

apt_private() { apt-get -c "$work/apt.conf" -q "$@"; }

log "fetching the $suite package index"
if ! apt_private update >"$work/apt.log" 2>&1 || grep -q '^\(E\|W\): ' "$work/apt.log"; then
	tail -n 20 "$work/apt.log" >&2
	[[ -n $(find "$work/lists" -maxdepth 1 -name '*_Packages*' -print -quit) ]] ||
		die "apt-get update for '$mirror $suite' failed (output above)"
	log "apt-get update reported problems (above); continuing with the index it fetched"
fi

log "resolving and downloading criu and its dependencies from $suite"
if ! apt_private install --download-only -y criu >"$work/apt.log" 2>&1; then
	tail -n 20 "$work/apt.log" >&2
	die "could not download criu from '$mirror $suite' (output above)"
fi
shopt -s nullglob
debs=("$work"/archives/*.deb)
shopt -u nullglob
((${#debs[@]})) || die "apt downloaded no packages (see $work/apt.log)"
pkgs=()
for deb in "${debs[@]}"; do
	pkgs+=("$(dpkg-deb -f "$deb" Package)=$(dpkg-deb -f "$deb" Version)")
done
log "downloaded ${#debs[@]} packages: ${pkgs[*]}"

# ---- 3c. unpack into a staging tree and check it

staging=$(mktemp -d "$parent/.$(basename "$prefix").new.XXXXXX")
chmod 0755 "$staging"
for deb in "${debs[@]}"; do
	dpkg-deb -x "$deb" "$staging" || die "dpkg-deb -x $deb failed"
done
: >"$staging/.gpusched-criu-owned"

# Locate the loader and the real binary (usr-merged or not).
rel_loader=''
for d in usr/lib/$triplet lib/$triplet usr/lib64 lib64; do
	if [[ -e $staging/$d/$loader_name ]]; then
		rel_loader=$d/$loader_name
		break
	fi
done
[[ -n $rel_loader ]] || die "the unpacked packages contain no $loader_name"
rel_criu=''
for d in usr/sbin sbin usr/bin bin; do
	if [[ -x $staging/$d/criu ]]; then
		rel_criu=$d/criu
		break
	fi
done
[[ -n $rel_criu ]] || die "the unpacked packages contain no criu binary"
rel_libdirs=()
for d in usr/lib/$triplet lib/$triplet usr/lib lib; do
	if [[ -d $staging/$d ]] && compgen -G "$staging/$d/*.so*" >/dev/null; then rel_libdirs+=("$d"); fi
done

# libpath ROOT: the --library-path value for a tree rooted at ROOT.
libpath() {
	local root=$1 out='' d
	for d in "${rel_libdirs[@]}"; do out+=${out:+:}$root/$d; done
	printf '%s\n' "$out"
}

# write_wrapper DIR ROOT: write DIR/bin/criu for a tree that will live at ROOT.
write_wrapper() {
	local dir=$1 root=$2
	mkdir -p "$dir/bin"
	cat >"$dir/bin/criu.tmp" <<EOF
#!/bin/sh
# Generated by gpusched scripts/install-criu.sh (recipe $RECIPE); do not edit.
# CRIU $criu_ver from Debian $suite, unpacked under $root and started through
# its own dynamic loader, so the host's libc is neither used nor changed.
# --library-path is a loader option: programs criu starts do not inherit it.
exec '$root/$rel_loader' --inhibit-cache \\
	--library-path '$(libpath "$root")' \\
	--argv0 '$root/bin/criu' \\
	'$root/$rel_criu' "\$@"
EOF
	chmod 0755 "$dir/bin/criu.tmp"
	mv -f "$dir/bin/criu.tmp" "$dir/bin/criu"
}

# Every library criu needs must resolve inside the tree.
if ! ldlist=$("$staging/$rel_loader" --inhibit-cache --library-path "$(libpath "$staging")" \
	--list "$staging/$rel_criu" 2>&1); then
	printf '%s\n' "$ldlist" >&2
	die "the $suite loader cannot load criu (output above)"
fi
outside=$(awk -v root="$staging/" '
	/=>/ { p = $3; if (p == "not") { print $1 " => not found"; next }
	       if (index(p, root) != 1) print $1 " => " p }' <<<"$ldlist")
[[ -z $outside ]] || die "libraries of criu not provided by the $suite packages: $outside"

criu_ver=$("$staging/$rel_loader" --inhibit-cache --library-path "$(libpath "$staging")" \
	"$staging/$rel_criu" --version | sed -n 's/^Version:[[:space:]]*\([0-9][0-9.]*\).*/\1/p' | head -n1)
version_ok "$criu_ver" || die "criu from $suite reports version '$criu_ver', need >= $MIN_MAJOR.0"

write_wrapper "$staging" "$staging"
if ! out=$("$staging/bin/criu" check 2>&1); then
	printf '%s\n' "$out" >&2
	die "'criu check' fails with criu $criu_ver from $suite (output above)"
fi
smoke_test "$staging/bin/criu"

# ---- 3d. final wrapper and stamp, then move the tree into place

write_wrapper "$staging" "$prefix"
{
	printf 'recipe=%s\n' "$RECIPE"
	printf 'version=%s\n' "$criu_ver"
	printf 'suite=%s\n' "$suite"
	printf 'mirror=%s\n' "$mirror"
	printf 'installed=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	printf 'packages=%s\n' "${pkgs[*]}"
} >"$staging/.gpusched-criu"
old=''
if [[ -e $prefix ]]; then
	old=$(mktemp -d "$parent/.$(basename "$prefix").old.XXXXXX")
	mv -T -- "$prefix" "$old/tree"
fi
mv -T -- "$staging" "$prefix"
staging=''
if [[ -n $old ]]; then rm -rf -- "$old"; fi

if ! out=$("$wrapper" check 2>&1); then
	rm -f -- "$stamp"
	printf '%s\n' "$out" >&2
	die "'$wrapper check' fails after moving the tree into place (output above)"
fi
log "installed CRIU $criu_ver from Debian $suite in $prefix"
finish "$wrapper" "$criu_ver"
