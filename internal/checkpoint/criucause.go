package checkpoint

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
	{"Connected TCP socket", "a process of the tree holds an established TCP connection, which gpusched does not ask CRIU " +
		"to image: close it before hibernating or forking"},
	{"sockets: Can't get", "a process of the tree has a network socket open, which this CRIU cannot image on this kernel: " +
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
