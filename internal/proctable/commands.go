package proctable

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpusched/gpusched/internal/listing"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// KeptCmdBytes bounds the command a record holds in memory and in its file,
// as listings cut it (api.ListCmdBytes, as encoded): a user's 756 records
// (--max-procs-per-user live, --keep-finished exited) of 256 KiB commands
// would otherwise hold 189 MiB of the daemon's memory, and every change of
// state would rewrite a quarter of a MiB. A longer command is kept whole in
// a file of its own, written once, read when asked for (Command).
const KeptCmdBytes = api.ListCmdBytes

// commandsDir is where, beside the records, the whole commands live.
const commandsDir = "cmds"

// maxCommandFile bounds what Command reads: a command the daemon accepts
// (256 KiB of argv) as JSON escapes it at worst (\u00XX, six bytes a byte).
const maxCommandFile = 6 * (256 << 10)

// keptCmd is argv as a record keeps it, in memory of its own (a cut
// argument would otherwise keep the whole string alive), and whether
// anything was cut.
func keptCmd(argv []string) ([]string, bool) {
	cut, truncated := listing.Cut(argv, KeptCmdBytes)
	if !truncated {
		return argv, false
	}
	kept := make([]string, len(cut))
	for i, a := range cut {
		kept[i] = strings.Clone(a)
	}
	return kept, true
}

// commands is the directory of whole commands: one file per record id,
// written before its record and removed after it, so that a record whose
// command is cut finds it; one left behind by a crash goes at the next
// Load.
type commands struct{ dir string }

func (c commands) path(id string) (string, error) {
	if id == "" || strings.ContainsAny(id, "/\x00") || strings.HasPrefix(id, ".") {
		return "", fmt.Errorf("command of record %q: invalid id", id)
	}
	return filepath.Join(c.dir, id+".json"), nil
}

// put stores argv for id, durably.
func (c commands) put(id string, argv []string) error {
	p, err := c.path(id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("command of record %s: %w", id, err)
	}
	b, err := json.Marshal(argv)
	if err != nil {
		return fmt.Errorf("command of record %s: %w", id, err)
	}
	if err := store.WriteFile(p, b, 0o600); err != nil {
		return fmt.Errorf("command of record %s: %w", id, err)
	}
	return nil
}

// get reads id's command.
func (c commands) get(id string) ([]string, error) {
	p, err := c.path(id)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("command of record %s: %w", id, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCommandFile+1))
	if err != nil {
		return nil, fmt.Errorf("command of record %s: %w", id, err)
	}
	if len(b) > maxCommandFile {
		return nil, fmt.Errorf("command of record %s: over %d bytes", id, maxCommandFile)
	}
	var argv []string
	if err := json.Unmarshal(b, &argv); err != nil || len(argv) == 0 {
		return nil, fmt.Errorf("command of record %s: not an argv (%v)", id, err)
	}
	return argv, nil
}

// remove deletes id's command, if any; the directory is not synced (a
// command brought back by a crash goes at the next Load).
func (c commands) remove(id string) {
	if p, err := c.path(id); err == nil {
		os.Remove(p)
	}
}

// prune removes the commands of ids not in keep.
func (c commands) prune(keep map[string]bool) error {
	ents, err := os.ReadDir(c.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("commands %s: %w", c.dir, err)
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !keep[id] {
			os.Remove(filepath.Join(c.dir, e.Name()))
		}
	}
	return nil
}
