package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// BinaryName is the slim supervisor binary (cmd/gpusched-init).
const BinaryName = "gpusched-init"

// SupervisorBeside returns the supervisor binary to run beside daemon (the
// gpuschedd binary, which can be the supervisor itself): BinaryName in the
// same directory when it is a regular file owned by root that only root
// may write, else daemon. why says why a binary that is there was passed
// over ("" when none is there or it was taken).
func SupervisorBeside(daemon string) (path, why string) {
	slim := filepath.Join(filepath.Dir(daemon), BinaryName)
	fi, err := os.Stat(slim)
	if err != nil {
		return daemon, ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		why = "not a regular file"
	case !ok || st.Uid != 0:
		why = "not owned by root"
	case fi.Mode().Perm()&0o022 != 0:
		why = fmt.Sprintf("writable by others (mode %04o)", fi.Mode().Perm())
	case fi.Mode().Perm()&0o111 == 0:
		why = "not executable"
	default:
		return slim, ""
	}
	return daemon, fmt.Sprintf("%s: %s", slim, why)
}
