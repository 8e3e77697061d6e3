// Command gpusched-init is the supervisor of one managed process tree and,
// re-executed as "gpusched-exec", the stage that becomes the tree's command
// (internal/sandbox); as "gpusched-logreader", the reader of a large logs
// reply in the caller's cgroups (internal/logreader). gpuschedd can be all
// of them itself; this binary links only the sandbox and the log reader,
// so each run starts two small processes instead of two copies of the
// daemon, and a log reader starts in a third of the time. gpuschedd uses
// it when it is installed beside it.
package main

import (
	"fmt"
	"os"

	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/sandbox"
)

func main() {
	switch {
	case sandbox.IsSupervisor():
		os.Exit(sandbox.Main())
	case sandbox.IsExecStage():
		os.Exit(sandbox.ExecMain())
	case logreader.IsReader():
		os.Exit(logreader.Main())
	}
	fmt.Fprintln(os.Stderr, "gpusched-init: started by gpuschedd only, as a managed process's supervisor")
	os.Exit(2)
}
