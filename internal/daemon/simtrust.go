package daemon

import (
	"fmt"

	"go.uber.org/zap"
)

// gpuUsers is a GPU backend that must know a user before that user's
// processes use the GPUs: the simulated one, where each user's processes
// register in a directory of that user's own.
type gpuUsers interface {
	AddUser(uid uint32) error
}

// addGPUUser readies the GPU backend for processes of uid.
func (d *Daemon) addGPUUser(uid uint32) error {
	u, ok := d.gpus.(gpuUsers)
	if !ok {
		return nil
	}
	if err := u.AddUser(uid); err != nil {
		return fmt.Errorf("simulated GPUs: %w", err)
	}
	return nil
}

// maxUntrustedLogged bounds the records one log line names.
const maxUntrustedLogged = 8

// logUntrusted says, in one bounded line, which simulated GPU records a
// sample ignored because they are not the named process's own: a user
// wrote them for another user's process, or in another user's name.
func logUntrusted(log *zap.Logger, untrusted []string) {
	if len(untrusted) == 0 {
		return
	}
	listed := untrusted[:min(len(untrusted), maxUntrustedLogged)]
	log.Warn("ignored simulated GPU records that are not the named process's own",
		zap.Strings("records", listed), zap.Int("more", len(untrusted)-len(listed)))
}
