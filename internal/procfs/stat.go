package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"syscall"
)

// ErrGone reports that a process does not exist (any more).
var ErrGone = errors.New("process is gone")

// Stat holds the fields of /proc/<pid>/stat the daemon uses.
type Stat struct {
	PID       int
	State     byte // R, S, D, Z, T, ...
	PPID      int
	PGRP      int
	Session   int
	StartTime uint64 // clock ticks after the host's boot, whatever the reader's time namespace
}

// ReadStat parses /proc/<pid>/stat. A missing process gives ErrGone.
func ReadStat(pid int) (Stat, error) {
	s, err := readStat(pid)
	if err == nil {
		s.StartTime = hostTicks(s.StartTime, bootOffsetTicks())
	}
	return s, err
}

// readStat parses /proc/<pid>/stat with the start time as the reader's
// time namespace shows it.
func readStat(pid int) (Stat, error) {
	b, err := ReadFile(fileOf(pid, "/stat"), MaxNumbers)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return Stat{}, fmt.Errorf("pid %d: %w", pid, ErrGone)
		}
		return Stat{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return parseStat(pid, b)
}

// parseStat splits after the last ')' since comm may hold spaces and parens.
func parseStat(pid int, b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return Stat{}, fmt.Errorf("pid %d: malformed stat", pid)
	}
	// f[0] is field 3 (state); starttime is field 22, so f[19].
	var f [20][]byte
	if fields(b[i+2:], f[:]) < len(f) || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("pid %d: malformed stat", pid)
	}
	s := Stat{PID: pid, State: f[0][0]}
	var err error
	if s.PPID, err = strconv.Atoi(string(f[1])); err != nil {
		return Stat{}, fmt.Errorf("pid %d: ppid: %w", pid, err)
	}
	if s.PGRP, err = strconv.Atoi(string(f[2])); err != nil {
		return Stat{}, fmt.Errorf("pid %d: pgrp: %w", pid, err)
	}
	if s.Session, err = strconv.Atoi(string(f[3])); err != nil {
		return Stat{}, fmt.Errorf("pid %d: session: %w", pid, err)
	}
	if s.StartTime, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return Stat{}, fmt.Errorf("pid %d: starttime: %w", pid, err)
	}
	return s, nil
}

// Exited reports whether the process has ended (zombie or dead).
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' }

// StartTime returns the start time of pid in clock ticks after boot.
func StartTime(pid int) (uint64, error) {
	s, err := ReadStat(pid)
	return s.StartTime, err
}

// Alive reports whether pid is running and is still the process that
// started at start (a zombie counts as gone).
func Alive(pid int, start uint64) bool {
	s, err := ReadStat(pid)
	return err == nil && s.StartTime == start && !s.Exited()
}

// fields splits b at runs of ASCII spaces, tabs and newlines into f, as
// many fields as f holds, and says how many it found (at most len(f)):
// bytes.Fields, without allocating the slice of all of them.
func fields(b []byte, f [][]byte) int {
	n := 0
	for n < len(f) {
		b = bytes.TrimLeft(b, " \t\n")
		if len(b) == 0 {
			break
		}
		end := bytes.IndexAny(b, " \t\n")
		if end < 0 {
			end = len(b)
		}
		f[n], b = b[:end], b[end:]
		n++
	}
	return n
}
