#!/usr/bin/env bash
# install.sh install|uninstall: put gpusched's binaries, systemd units,
# sysusers/tmpfiles snippets, shell completions and docs in place (or take
# them away), then let systemd know when it runs. `make install` and
# `make uninstall` call it after building.
#
# Environment: PREFIX (default /usr/local), DESTDIR (a staging root: nothing
# outside it is touched, and systemd is not called), BIN (the built
# binaries, default ./bin).
set -euo pipefail
cd "$(dirname "$0")/.."

action=${1:-}
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
BIN=${BIN:-bin}
root=$DESTDIR$PREFIX

bindir=$root/bin
unitdir=$root/lib/systemd/system
sysusersdir=$root/lib/sysusers.d
tmpfilesdir=$root/lib/tmpfiles.d
docdir=$root/share/doc/gpusched
bashdir=$root/share/bash-completion/completions
zshdir=$root/share/zsh/site-functions
fishdir=$root/share/fish/vendor_completions.d

die() { echo "install.sh: $*" >&2; exit 1; }
# systemd is told only for a live install on a machine where it runs.
systemd_running() { [[ -z $DESTDIR && -d /run/systemd/system ]]; }

files() {
	printf '%s\n' \
		"$bindir/gpuschedd" "$bindir/gpusched-init" "$bindir/gpuschedctl" "$bindir/gpusched-simjob" "$bindir/gpusched-router" \
		"$unitdir/gpuschedd.service" "$unitdir/gpuschedd.socket" "$unitdir/gpusched-router.service" \
		"$sysusersdir/gpusched.conf" "$tmpfilesdir/gpusched.conf" \
		"$bashdir/gpuschedctl" "$zshdir/_gpuschedctl" "$fishdir/gpuschedctl.fish" \
		"$docdir/README.md" "$docdir/router.md" "$docdir/config.example.toml"
}

install_all() {
	for b in gpuschedd gpusched-init gpuschedctl gpusched-simjob gpusched-router; do
		[[ -x $BIN/$b ]] || die "$BIN/$b is missing: run make build first"
	done
	for b in gpuschedd gpusched-init gpuschedctl gpusched-simjob gpusched-router; do
		install -D -m 0755 "$BIN/$b" "$bindir/$b"
	done
	# The units name the binaries where PREFIX put them.
	install -d -m 0755 "$unitdir"
	sed "s|/usr/local/bin/|$PREFIX/bin/|g; s|/usr/local/share/doc/|$PREFIX/share/doc/|g" \
		deploy/systemd/gpuschedd.service >"$unitdir/gpuschedd.service"
	sed "s|/usr/local/share/doc/|$PREFIX/share/doc/|g" deploy/systemd/gpuschedd.socket >"$unitdir/gpuschedd.socket"
	sed "s|/usr/local/bin/|$PREFIX/bin/|g; s|/usr/local/share/doc/|$PREFIX/share/doc/|g" \
		deploy/systemd/gpusched-router.service >"$unitdir/gpusched-router.service"
	chmod 0644 "$unitdir/gpuschedd.service" "$unitdir/gpuschedd.socket" "$unitdir/gpusched-router.service"
	install -D -m 0644 deploy/systemd/gpusched.sysusers "$sysusersdir/gpusched.conf"
	install -D -m 0644 deploy/systemd/gpusched.tmpfiles "$tmpfilesdir/gpusched.conf"
	install -d -m 0755 "$bashdir" "$zshdir" "$fishdir"
	"$BIN/gpuschedctl" completion bash >"$bashdir/gpuschedctl"
	"$BIN/gpuschedctl" completion zsh >"$zshdir/_gpuschedctl"
	"$BIN/gpuschedctl" completion fish >"$fishdir/gpuschedctl.fish"
	chmod 0644 "$bashdir/gpuschedctl" "$zshdir/_gpuschedctl" "$fishdir/gpuschedctl.fish"
	install -D -m 0644 README.md "$docdir/README.md"
	install -D -m 0644 docs/router.md "$docdir/router.md"
	install -D -m 0644 deploy/config.example.toml "$docdir/config.example.toml"
	if systemd_running; then
		systemd-sysusers "$sysusersdir/gpusched.conf"
		systemd-tmpfiles --create "$tmpfilesdir/gpusched.conf"
		systemctl daemon-reload
		echo "installed; start it with: systemctl enable --now gpuschedd.socket gpuschedd.service"
	else
		echo "installed under ${DESTDIR:-/}$PREFIX"
	fi
}

uninstall_all() {
	if systemd_running; then
		# Managed processes keep running (KillMode=process); a later install re-adopts them.
		systemctl disable --now gpusched-router.service gpuschedd.socket gpuschedd.service 2>/dev/null || true
	fi
	while read -r f; do
		rm -f "$f"
	done < <(files)
	rmdir "$docdir" 2>/dev/null || true
	if systemd_running; then
		systemctl daemon-reload
	fi
	echo "uninstalled; state (/var/lib/gpusched), logs (/var/log/gpusched) and the gpusched group stay"
}

case $action in
install) install_all ;;
uninstall) uninstall_all ;;
files) files ;;
*) die "usage: install.sh install|uninstall|files" ;;
esac
