package testutil

import (
	"os"
	"testing"

	"github.com/coreos/go-systemd/v22/unit"
)

// UnitSettings reads a systemd unit file as "Section.Name" -> its values, in
// file order, with systemd's own parser.
func UnitSettings(t testing.TB, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts, err := unit.DeserializeOptions(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	settings := map[string][]string{}
	for _, o := range opts {
		settings[o.Section+"."+o.Name] = append(settings[o.Section+"."+o.Name], o.Value)
	}
	return settings
}
