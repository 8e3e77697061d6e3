package proctable

import (
	"slices"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// Owner is the user a process runs as.
type Owner struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	User   string   `json:"user"`
}

// Record is one managed process as persisted. Published records are never
// modified; Update hands its callback a deep copy.
type Record struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Owner      Owner     `json:"owner"`
	Cmd        []string  `json:"cmd"`
	Dir        string    `json:"dir"`
	GPUs       []string  `json:"gpus"` // UUIDs, in CUDA_VISIBLE_DEVICES order
	Nice       int       `json:"nice"`
	State      api.State `json:"state"`
	InitPID    int       `json:"init_pid"`
	InitStart  uint64    `json:"init_start"`
	PID        int       `json:"pid"`
	PIDStart   uint64    `json:"pid_start"`
	BootID     string    `json:"boot_id"`
	LogPath    string    `json:"log_path"`
	StatusPath string    `json:"status_path"`
	CreatedAt  time.Time `json:"created_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	ExitedAt   time.Time `json:"exited_at,omitzero"`
	Exit       *api.Exit `json:"exit,omitempty"`
	Rev        uint64    `json:"rev"` // bumped on every write
}

// Clone returns a deep copy.
func (r Record) Clone() Record {
	r.Owner.Groups = slices.Clone(r.Owner.Groups)
	r.Cmd = slices.Clone(r.Cmd)
	r.GPUs = slices.Clone(r.GPUs)
	if r.Exit != nil {
		e := *r.Exit
		if e.Code != nil {
			c := *e.Code
			e.Code = &c
		}
		r.Exit = &e
	}
	return r
}

// Live reports whether the record's tree may still exist.
func (r Record) Live() bool { return r.State != api.StateExited }
