package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/cli.md from the command definitions")

// TestCLIDocsUpToDate: docs/cli.md is generated from the command tree
// (cobra/doc), so it cannot drift from --help.
func TestCLIDocsUpToDate(t *testing.T) {
	want := renderCLIDocs(t)
	path := filepath.Join("..", "..", "docs", "cli.md")
	if *updateDocs {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("docs/cli.md is not what the commands say (%v); regenerate it: go test ./internal/cli -run TestCLIDocsUpToDate -update", err)
	}
}

// renderCLIDocs is every command's help as one Markdown file, in command
// order: the root first, then each command and its subcommands.
func renderCLIDocs(t *testing.T) []byte {
	t.Helper()
	root := newRoot(&app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	root.InitDefaultCompletionCmd()
	var out bytes.Buffer
	out.WriteString("# gpuschedctl reference\n\nGenerated from the command definitions by `go test ./internal/cli -run TestCLIDocsUpToDate -update`; `gpuschedctl COMMAND --help` prints the same.\n\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c != root {
			return
		}
		c.DisableAutoGenTag = true
		if err := doc.GenMarkdownCustom(c, &out, func(name string) string { return "#" + anchor(name) }); err != nil {
			t.Fatal(err)
		}
		out.WriteString("\n")
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out.Bytes()
}

// anchor is the in-page link GitHub makes for a command's heading.
func anchor(file string) string {
	name := file[:len(file)-len(filepath.Ext(file))]
	b := []byte(name)
	for i, c := range b {
		if c == '_' {
			b[i] = '-'
		}
	}
	return string(b)
}
