package mpstest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Name is the fake's file name, the real binary's.
const Name = "nvidia-cuda-mps-control"

// CallsFile is where the fake records its calls, one line each, beside
// itself: "start PIPE_DIR LOG_DIR" for -d, "quit PIPE_DIR" for a quit, and
// "fail ..." when it refused one.
const CallsFile = "calls"

const script = `#!/bin/sh
# Fake nvidia-cuda-mps-control (internal/mps/mpstest).
calls="$(dirname "$0")/` + CallsFile + `"
pipe="${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}"
case "$1" in
-d)
	if [ -e "$pipe/control" ]; then
		echo "fail start $pipe" >> "$calls"
		echo "An instance of this daemon is already running" >&2
		exit 1
	fi
	echo "start $pipe ${CUDA_MPS_LOG_DIRECTORY:-/var/log/nvidia-mps}" >> "$calls"
	: > "$pipe/control"
	exit 0
	;;
"")
	read -r cmd
	if [ "$cmd" != quit ]; then
		echo "fail $cmd $pipe" >> "$calls"
		echo "unknown command $cmd" >&2
		exit 1
	fi
	if [ ! -e "$pipe/control" ]; then
		echo "fail quit $pipe" >> "$calls"
		echo "Cannot find MPS control daemon process" >&2
		exit 1
	fi
	rm -f "$pipe/control"
	echo "quit $pipe" >> "$calls"
	exit 0
	;;
*)
	echo "usage: nvidia-cuda-mps-control [-d | -f]" >&2
	exit 2
	;;
esac
`

// Install writes the fake into dir (which must exist) and returns its path.
func Install(dir string) (string, error) {
	path := filepath.Join(dir, Name)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", err
	}
	return path, os.Chmod(path, 0o755)
}

// Calls returns the calls the fake installed in dir recorded, in order.
func Calls(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, CallsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return []string{}, nil
	}
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return []string{}, nil
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n"), nil
}

// Count returns how many recorded calls start with verb ("start", "quit",
// "fail").
func Count(calls []string, verb string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, verb+" ") {
			n++
		}
	}
	return n
}
