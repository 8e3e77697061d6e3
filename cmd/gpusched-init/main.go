// Command gpusched-init is the supervisor of one managed process tree and,
// re-executed as "gpusched-exec", the stage that becomes the tree's command
// (internal/sandbox). gpuschedd can be both itself; this binary links only
// the sandbox, so each run starts two small processes instead of two copies
// of the daemon. gpuschedd uses it when it is installed beside it.
package main

import (
	"fmt"
	"os"

	"github.com/gpusched/gpusched/internal/sandbox"
)

func main() {
	switch {
	case sandbox.IsSupervisor():
		os.Exit(sandbox.Main())
	case sandbox.IsExecStage():
		os.Exit(sandbox.ExecMain())
	}
	fmt.Fprintln(os.Stderr, "gpusched-init: started by gpuschedd only, as a managed process's supervisor")
	os.Exit(2)
}
