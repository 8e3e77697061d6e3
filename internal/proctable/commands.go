package proctable

import (
	"github.com/gpusched/gpusched/internal/listing"
	"github.com/gpusched/gpusched/pkg/api"
)

// KeptCmdBytes bounds the command a record holds in memory and in its file,
// as listings cut it (api.ListCmdBytes, as encoded): a user's 756 records
// (--max-procs-per-user live, --keep-finished exited) of 256 KiB commands
// would otherwise hold 189 MiB of the daemon's memory, and every change of
// state would rewrite a quarter of a MiB. A longer command is kept whole
// apart (commandsDir), written once, read when asked for (Command).
const KeptCmdBytes = api.ListCmdBytes

// commandsDir is where, beside the records, the whole commands live.
const commandsDir = "cmds"

// maxCommandFile bounds what Command reads: a command the daemon accepts
// (256 KiB of argv) as JSON escapes it at worst (\u00XX, six bytes a byte).
const maxCommandFile = 6 * (256 << 10)

// keptCmd is argv as a record keeps it, and whether anything was cut.
func keptCmd(argv []string) ([]string, bool) { return listing.Keep(argv, KeptCmdBytes) }
