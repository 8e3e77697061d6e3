package cli

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImports keeps the CLI on pkg/api, cobra, the dashboard's terminal UI
// (Bubble Tea v2 and what it brings) and the standard library: never the
// daemon or a subsystem.
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
	// The dashboard's terminal UI and its dependencies.
	tui := []string{"charm.land/bubbletea/v2", "charm.land/lipgloss/v2", "github.com/charmbracelet/",
		"github.com/clipperhouse/", "github.com/lucasb-eyer/go-colorful", "github.com/mattn/go-runewidth",
		"github.com/muesli/cancelreader", "github.com/rivo/uniseg", "github.com/xo/terminfo",
		"golang.org/x/sync/", "golang.org/x/sys/"}
	for _, dep := range strings.Fields(string(out)) {
		if !allowed[dep] && !slices.ContainsFunc(tui, func(p string) bool { return strings.HasPrefix(dep, p) }) {
			t.Errorf("internal/cli depends on %s", dep)
		}
	}
}
