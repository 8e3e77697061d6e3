package testutil

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// PythonAs starts the Python script with args as u, killed when t ends,
// and returns its stdin and its stdout's lines.
func PythonAs(t testing.TB, u User, script string, args ...string) (io.Writer, *bufio.Scanner) {
	t.Helper()
	cmd := PythonCmdAs(u, script, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return stdin, bufio.NewScanner(out)
}

// PythonOutputAs runs the Python script with args as u and returns what
// it printed, trimmed.
func PythonOutputAs(u User, script string, args ...string) (string, error) {
	out, err := PythonCmdAs(u, script, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// PythonCmdAs is the Python script with args, to run as u (the system's
// python3: a user cannot reach root's).
func PythonCmdAs(u User, script string, args ...string) *exec.Cmd {
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", script}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()}}
	return cmd
}

// DeletedFileHolder is a Python script that writes its second argument
// into the file at its first, deletes the file, keeps it open and prints
// "read <content>" at once and at each SIGUSR1.
const DeletedFileHolder = `import os, signal, sys
f = open(sys.argv[1], "w+")
f.write(sys.argv[2])
f.flush()
os.unlink(sys.argv[1])
def read(*_):
    f.seek(0)
    print("read " + f.read(), flush=True)
signal.signal(signal.SIGUSR1, read)
read()
while True:
    signal.pause()
`
