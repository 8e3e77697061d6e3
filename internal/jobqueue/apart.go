package jobqueue

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/listing"
	"github.com/gpusched/gpusched/pkg/api"
)

// keptBytes bounds what a finished job keeps of its command and
// environment, in memory and in its record: a user's --keep-finished 500
// finished jobs of 256 KiB each would otherwise hold 125 MiB of the
// daemon's memory. Past it, the job keeps its command cut as listings cut
// it (api.ListCmdBytes) and no environment, and the queue keeps both whole
// apart (wholeDir), read when asked for (Command). An unfinished job keeps
// both, for its attempts (--max-job-bytes-per-user bounds those).
const keptBytes = api.ListCmdBytes

// wholeDir is where, beside the records, the whole commands live.
const wholeDir = "cmds"

// maxWholeFile bounds what Command reads: a command and environment the
// daemon accepts (256 KiB) as JSON escapes them at worst (six bytes a byte).
const maxWholeFile = 6 * (256 << 10)

// whole is what a finished job keeps apart.
type whole struct {
	Cmd []string          `json:"cmd"`
	Env map[string]string `json:"env,omitempty"`
}

// Bytes is what j keeps of its command and environment, counted as execve
// counts them.
func (j *Job) Bytes() uint64 {
	var n uint64
	for _, s := range j.Cmd {
		n += uint64(len(s)) + 1
	}
	for k, v := range j.Env {
		n += uint64(len(k)+len(v)) + 2
	}
	return n
}

// putApartLocked keeps a finished job's command and environment apart
// when they are over keptBytes, and cuts them in j. A failed write leaves
// j whole.
func (q *Queue) putApartLocked(j *Job) error {
	if j.Apart || !j.State.Terminal() || j.Bytes() <= keptBytes {
		return nil
	}
	if err := q.whole.Put(j.ID, whole{Cmd: j.Cmd, Env: j.Env}); err != nil {
		return err
	}
	j.Cmd, j.CmdTruncated = listing.Keep(j.Cmd, keptBytes)
	j.Env, j.Apart = nil, true
	return nil
}

// Command is j's whole command: j.Cmd, or where the job keeps that cut
// (CmdTruncated), what the queue keeps apart.
func (q *Queue) Command(j *Job) ([]string, error) {
	if !j.CmdTruncated {
		return j.Cmd, nil
	}
	var w whole
	if err := q.whole.Get(j.ID, &w); err != nil {
		return nil, fmt.Errorf("job %q: its command: %w", j.Name, err)
	}
	if len(w.Cmd) == 0 {
		return nil, fmt.Errorf("job %q: its command kept apart is empty", j.Name)
	}
	return w.Cmd, nil
}
