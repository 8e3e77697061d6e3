package checkpoint

import (
	"errors"
	"strings"
)

// criuCause is an Error line of CRIU's dump log that means the tree holds
// something CRIU cannot image, and what to tell the caller instead.
type criuCause struct {
	match string // in the Error line
	why   string
}

// unimageable are the causes known to refuse a dump whatever its retries;
// the first that an Error line matches explains it.
var unimageable = []criuCause{
	{"External socket is used", "a process of the tree holds a Unix socket connected to something outside the tree " +
		"(a script using gpuschedd's own socket through the SDK, D-Bus, a display); CRIU cannot image such a connection: " +
		"close it before hibernating or forking"},
	// Linux 6.16 restricted SO_PASSCRED and SO_PASSSEC to Unix and netlink
	// sockets; CRIU before 4.2 reads them from every socket and fails with
	// "sockets: Can't get 1:16 opt: Operation not supported" (criu#2718,
	// fixed by criu commit 4b7398595 in 4.2).
	{"sockets: Can't get", "a process of the tree has a network socket open, which this CRIU cannot image on this kernel " +
		"(on Linux 6.16 and later, CRIU before 4.2 cannot read a network socket's options: criu#2718): " +
		"close it before hibernating or forking"},
}

// unimageableWhy is why CRIU's Error lines say the tree cannot be imaged,
// or "" when they name no known cause.
func unimageableWhy(lines []string) string {
	for _, c := range unimageable {
		if mentions(lines, c.match) {
			return c.why
		}
	}
	return ""
}

// FileChanged reports whether err is a restore CRIU failed on its own
// check of a file the tree held (criu/files-reg.c: "File %s has bad size
// %lu (expect %lu)", "bad mode", "bad build-ID"): its lines tell the size
// and mode of whatever the path now leads to, which the tree's owner may
// not be allowed to know.
func FileChanged(err error) bool {
	var ce *CRIUError
	if !errors.As(err, &ce) {
		return false
	}
	for _, l := range ce.Lines {
		if strings.Contains(l, " has bad size ") || strings.Contains(l, " has bad mode ") || strings.Contains(l, " has bad build-ID") {
			return true
		}
	}
	return false
}
