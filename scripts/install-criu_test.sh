#!/usr/bin/env bash
# install-criu_test.sh: end-to-end test of scripts/install-criu.sh.
#
# Usage: scripts/install-criu_test.sh [--reuse]
#
#   By default installs into a fresh temporary prefix (downloads about 8 MB
#   from the Debian mirror in the apt sources), so the whole install path runs;
#   the temporary prefix is removed at the end. With --reuse, the default
#   prefix (or GPUSCHED_CRIU_PREFIX) is used and kept, so the first run is
#   only a full install when nothing is installed yet.
#
# Checks:
#   - first run installs (or finds) CRIU >= 4.0 and prints "criu: PATH (VER)"
#     and PATH as its last stdout line; --print-path prints only PATH;
#   - the second run says "already installed" and takes < 2 s;
#   - `criu --version` >= 4.0 and `criu check` pass through the wrapper;
#   - a shell loop counting in memory is dumped, killed, restored, and goes on
#     counting from where it was (its memory came back), then is killed;
#   - --verify runs the installer's own dump/restore smoke test;
#   - a fake system criu >= 4.0 on PATH is preferred, one < 4.0 is ignored;
#   - the mirror is found in one-line and deb822 apt sources (test files,
#     file:// URIs) and GPUSCHED_CRIU_MIRROR overrides it;
#   - a bad GPUSCHED_CRIU_PREFIX is refused; a non-root caller gets the path
#     of an existing install, and a clear error when there is none.
#
# Needs root (CRIU dumps need it). Exit status 0 when every check passes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
installer=$here/install-criu.sh
reuse=0
case ${1:-} in
--reuse) reuse=1 ;;
'') ;;
*)
	echo "usage: $0 [--reuse]" >&2
	exit 2
	;;
esac

if [[ $(id -u) != 0 ]]; then
	echo "install-criu_test: SKIP: needs root" >&2
	exit 0
fi

failures=0
pass() { printf 'ok   %s\n' "$*"; }
fail() {
	printf 'FAIL %s\n' "$*"
	failures=$((failures + 1))
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/install-criu-test.XXXXXX")
chmod 0755 "$tmp" # the non-root checks read the prefix inside it
loop_pid=''
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
	if [[ -n $loop_pid ]] && kill -0 "$loop_pid" 2>/dev/null; then kill -KILL "$loop_pid" 2>/dev/null || true; fi
	rm -rf -- "$tmp"
}
trap cleanup EXIT

if ((reuse)); then
	prefix=${GPUSCHED_CRIU_PREFIX:-/opt/gpusched/criu}
else
	prefix=$tmp/prefix/criu
fi
export GPUSCHED_CRIU_PREFIX=$prefix
wrapper=$prefix/bin/criu

now_ms() { date +%s%3N; }

# ---- first run
t0=$(now_ms)
if "$installer" --no-system >"$tmp/run1.out" 2>"$tmp/run1.err"; then
	t1=$(now_ms)
	pass "first run ($((t1 - t0)) ms)"
else
	cat "$tmp/run1.err"
	fail "first run exited non-zero"
	exit 1
fi
first_ms=$((t1 - t0))
path=$(tail -n1 "$tmp/run1.out")
if [[ $path == "$wrapper" && -x $path ]]; then pass "last stdout line is the wrapper path"; else fail "last stdout line '$path', want $wrapper"; fi
if grep -Eq "^criu: $wrapper \([0-9]+\.[0-9.]+\)$" "$tmp/run1.out"; then pass "summary line: $(head -n1 "$tmp/run1.out")"; else fail "no summary line in: $(cat "$tmp/run1.out")"; fi

# ---- second run: fast, says so
t0=$(now_ms)
"$installer" --no-system >"$tmp/run2.out" 2>"$tmp/run2.err" || fail "second run exited non-zero: $(cat "$tmp/run2.err")"
t1=$(now_ms)
second_ms=$((t1 - t0))
if grep -q 'already installed' "$tmp/run2.err"; then pass "second run says already installed"; else fail "second run did not say already installed: $(cat "$tmp/run2.err")"; fi
if ((second_ms < 2000)); then pass "second run took $second_ms ms (< 2000)"; else fail "second run took $second_ms ms"; fi
if cmp -s "$tmp/run1.out" "$tmp/run2.out"; then pass "second run prints the same stdout"; else fail "stdout differs between runs"; fi

out=$("$installer" --no-system --print-path 2>/dev/null) || fail "--print-path exited non-zero"
if [[ $out == "$wrapper" ]]; then pass "--print-path prints only the path"; else fail "--print-path printed '$out'"; fi

# ---- the wrapper itself
ver=$("$wrapper" --version | sed -n 's/^Version:[[:space:]]*//p')
if [[ ${ver%%.*} =~ ^[0-9]+$ ]] && ((${ver%%.*} >= 4)); then pass "criu --version: $ver"; else fail "criu --version: '$ver'"; fi
if "$wrapper" check >"$tmp/check.out" 2>&1; then pass "criu check: $(tail -n1 "$tmp/check.out")"; else fail "criu check: $(cat "$tmp/check.out")"; fi

# ---- dump and restore a process whose memory matters
# shellcheck source-path=SCRIPTDIR source=lib/procs.sh
source "$here/lib/procs.sh"
alive() {
	local st
	st=$(proc_state "$1")
	[[ -n $st && $st != Z && $st != X ]]
}

smoke() {
	local img=$tmp/img counter=$tmp/counter before after i
	mkdir -m 0700 "$img"
	# The count lives in the shell's memory; the file only reports it.
	(
		cd / || exit 1
		for fd in /proc/"$BASHPID"/fd/*; do # no inherited descriptors
			fd=${fd##*/}
			if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
		done
		# shellcheck disable=SC2016 # expanded by the inner sh
		exec setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i >"$1.tmp"; mv "$1.tmp" "$1"; sleep 0.05; done' sh "$counter" </dev/null >/dev/null 2>&1
	) &
	loop_pid=$!
	disown "$loop_pid"
	for ((i = 0; i < 100; i++)); do
		[[ -s $counter ]] && (($(cat "$counter") >= 5)) && break
		sleep 0.05
	done
	if ! "$wrapper" dump -t "$loop_pid" -D "$img" -o dump.log >/dev/null 2>&1; then
		tail -n 20 "$img/dump.log"
		fail "criu dump of the counting loop (pid $loop_pid)"
		return
	fi
	before=$(cat "$counter")
	sleep 0.3
	if [[ $(cat "$counter") != "$before" ]]; then fail "the loop kept counting after dump"; fi
	for ((i = 0; i < 200; i++)); do
		pid_busy "$loop_pid" || break
		sleep 0.05
	done
	if pid_busy "$loop_pid"; then
		fail "pid $loop_pid still in use 10 s after the dump"
		return
	fi
	if ! "$wrapper" restore -D "$img" -d -o restore.log >/dev/null 2>&1; then
		tail -n 20 "$img/restore.log"
		fail "criu restore of the counting loop"
		return
	fi
	for ((i = 0; i < 100; i++)); do
		after=$(cat "$counter")
		((after > before + 3)) && break
		sleep 0.05
	done
	if alive "$loop_pid" && ((after > before + 3)); then
		pass "dump/restore: loop restored as pid $loop_pid, counted on from $before to $after"
	else
		fail "dump/restore: restored loop not counting (before $before, now $after)"
	fi
	kill -KILL "$loop_pid" 2>/dev/null || true
	for ((i = 0; i < 200; i++)); do
		alive "$loop_pid" || break
		sleep 0.05
	done
	if alive "$loop_pid"; then fail "restored loop survived SIGKILL"; else loop_pid=''; fi
}
smoke

if "$installer" --no-system --verify >/dev/null 2>"$tmp/verify.err" && grep -q 'smoke test passed' "$tmp/verify.err"; then
	pass "--verify runs the installer's smoke test"
else
	fail "--verify: $(cat "$tmp/verify.err")"
fi

# ---- system criu detection, with fake criu binaries on PATH
mkfake() { # DIR VERSION
	mkdir -p "$1"
	cat >"$1/criu" <<EOF
#!/bin/sh
case "\$1" in --version) echo "Version: $2" ;; check) echo "Looks good." ;; *) exit 1 ;; esac
EOF
	chmod +x "$1/criu"
}
mkfake "$tmp/fake4" 4.2
out=$(PATH=$tmp/fake4:$PATH GPUSCHED_CRIU_PREFIX=$tmp/none/criu "$installer" --print-path 2>/dev/null) || true
if [[ $out == "$tmp/fake4/criu" && ! -e $tmp/none ]]; then pass "system criu 4.2 is used, nothing installed"; else fail "system criu 4.2: got '$out'"; fi
mkfake "$tmp/fake3" 3.17.1
out=$(PATH=$tmp/fake3:$PATH "$installer" --print-path 2>"$tmp/fake3.err") || true
if [[ $out == "$wrapper" ]] && grep -q 'ignoring system' "$tmp/fake3.err"; then pass "system criu 3.17.1 is ignored"; else fail "system criu 3.17.1: got '$out' $(cat "$tmp/fake3.err")"; fi

# ---- mirror resolution from apt sources (APT_CONFIG points apt at test files)
# mirror_case NAME WANT: write NAME's files under $tmp/apt-NAME first.
mirror_case() {
	local d=$tmp/apt-$1 want=$2 got
	printf 'Dir::Etc::sourcelist "%s/sources.list";\nDir::Etc::sourceparts "%s/parts";\n' "$d" "$d" >"$d/apt.conf"
	got=$(APT_CONFIG=$d/apt.conf GPUSCHED_CRIU_MIRROR='' "$installer" --print-mirror 2>"$d/err") || true
	if [[ $got == "$want" ]]; then
		pass "mirror ($1): ${want:-refused with a clear error}"
	else
		fail "mirror ($1): got '$got', want '$want' $(cat "$d/err")"
	fi
	if [[ -z $want ]] && ! grep -q 'GPUSCHED_CRIU_MIRROR' "$d/err"; then fail "mirror ($1): unclear error: $(cat "$d/err")"; fi
}
codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release | tr -d "\"'")
if [[ -n $codename ]]; then
	# One-line format with options; the security entry comes first.
	mkdir -p "$tmp/apt-oneline/parts"
	cat >"$tmp/apt-oneline/sources.list" <<EOF
# deb file:///srv/commented/debian $codename main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] file:///srv/m/debian-security $codename-security main
deb-src file:///srv/src/debian $codename main
deb [ arch=amd64 trusted=yes ] file:///srv/a/debian/ $codename main contrib
EOF
	echo "deb file:///srv/b/debian $codename main" >"$tmp/apt-oneline/parts/x.list.disabled"
	mirror_case oneline file:///srv/a/debian

	# deb822: a disabled stanza, a deb-src one, folded URIs, suites in any order.
	mkdir -p "$tmp/apt-deb822/parts"
	: >"$tmp/apt-deb822/sources.list"
	cat >"$tmp/apt-deb822/parts/debian.sources" <<EOF
# a comment
Types: deb
URIs: file:///srv/off/debian
Suites: $codename
Components: main
Enabled: no

Types: deb-src
URIs: file:///srv/src/debian
Suites: $codename

Types: deb
URIs: file:///srv/m/debian-security
Suites: $codename-security
Components: main

Types: deb deb-src
URIs:
 file:///srv/c/debian
 file:///srv/d/debian
Suites: $codename-updates $codename
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	mirror_case deb822 file:///srv/c/debian

	# Only an -updates suite: still a mirror of the Debian archive.
	mkdir -p "$tmp/apt-updates/parts"
	echo "deb file:///srv/u/debian $codename-updates main" >"$tmp/apt-updates/sources.list"
	mirror_case updates file:///srv/u/debian

	# Nothing usable: a clear error that names GPUSCHED_CRIU_MIRROR.
	mkdir -p "$tmp/apt-none/parts"
	echo "deb file:///srv/m/debian-security $codename-security main" >"$tmp/apt-none/sources.list"
	mirror_case none ''
fi
if [[ $(GPUSCHED_CRIU_MIRROR=file:///srv/override/debian/ "$installer" --print-mirror 2>/dev/null) == file:///srv/override/debian ]]; then
	pass "GPUSCHED_CRIU_MIRROR overrides the apt sources"
else
	fail "GPUSCHED_CRIU_MIRROR is not honoured"
fi

# ---- bad input and non-root callers
if out=$(GPUSCHED_CRIU_PREFIX=relative/criu "$installer" 2>&1); then fail "relative prefix accepted"; elif [[ $out == *'absolute path'* ]]; then pass "relative prefix refused"; else fail "relative prefix: $out"; fi
if "$installer" --bogus >/dev/null 2>&1; then fail "unknown option accepted"; else pass "unknown option refused (exit $?)"; fi
if command -v setpriv >/dev/null 2>&1 && [[ $(stat -c %a "$installer") == *5 || $(stat -c %a "$installer") == *7 ]]; then
	out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$installer" --no-system --print-path 2>/dev/null) || true
	if [[ $out == "$wrapper" ]]; then pass "non-root caller gets the installed path"; else fail "non-root caller got '$out'"; fi
	if out=$(setpriv --reuid=65534 --regid=65534 --clear-groups env GPUSCHED_CRIU_PREFIX="$tmp/none2/criu" "$installer" --no-system 2>&1); then
		fail "non-root install succeeded?"
	elif [[ $out == *'needs root'* ]]; then
		pass "non-root install refused with a clear message"
	else
		fail "non-root install: $out"
	fi
fi

echo "timings: first run ${first_ms} ms, second run ${second_ms} ms"
if ((failures)); then
	echo "install-criu_test: $failures check(s) failed"
	exit 1
fi
echo "install-criu_test: all checks passed"
