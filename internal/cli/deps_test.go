package cli

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the CLI on pkg/api, cobra and the standard library.
func TestImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/gpusched/gpusched/internal/cli": true,
		"github.com/gpusched/gpusched/pkg/api":      true,
		"github.com/spf13/cobra":                    true,
		"github.com/spf13/pflag":                    true,
		"github.com/inconshreveable/mousetrap":      true, // cobra, on Windows
	}
	for _, dep := range strings.Fields(string(out)) {
		if !allowed[dep] {
			t.Errorf("internal/cli depends on %s", dep)
		}
	}
}
