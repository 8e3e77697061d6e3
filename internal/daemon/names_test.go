package daemon

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestLogPathsNeverShared: each owner's process of one name logs to a file
// of its own, and root's never takes the NAME.log that a record of an
// earlier version (which logged every user's process there) still holds.
func TestLogPathsNeverShared(t *testing.T) {
	h := newHarness(t)
	dir := h.cfg.LogDir
	for k, want := range map[proctable.Key]string{
		{UID: 0, Name: "train"}:    "train.log",
		{UID: 1000, Name: "train"}: "train@1000.log",
		{UID: 1001, Name: "train"}: "train@1001.log",
	} {
		if got := h.d.logPath(k); got != filepath.Join(dir, want) {
			t.Errorf("logPath(%v) = %s, want %s", k, got, want)
		}
	}
	legacy := proctable.Record{ID: "legacy", Name: "train", Owner: proctable.Owner{UID: 1000, User: "u1000"}, Cmd: []string{"true"},
		State: api.StateExited, CreatedAt: time.Now(), LogPath: filepath.Join(dir, "train.log")}
	if _, err := h.d.table.Create(legacy); err != nil {
		t.Fatal(err)
	}
	if got := h.d.logPath(proctable.Key{Name: "train"}); got != filepath.Join(dir, "train@0.log") {
		t.Errorf("root's train beside an earlier version's record of train.log: %s, want train@0.log", got)
	}
}

func TestSplitRef(t *testing.T) {
	for ref, want := range map[string]string{
		"train": " train false", "alice/train": "alice train true", "1001/train": "1001 train true",
		"alice@corp.example/train": "alice@corp.example train true", `CORP\alice/t`: `CORP\alice t true`,
	} {
		user, name, qualified, err := splitRef(ref)
		if got := fmt.Sprint(user, " ", name, " ", qualified); err != nil || got != want {
			t.Errorf("splitRef(%q) = %q %v, want %q", ref, got, err, want)
		}
	}
	for _, ref := range []string{"", "/train", "../train", "./train", "a\nb/train", "alice/", "alice/a/b", "alice/..", strings.Repeat("u", 257) + "/t"} {
		if _, _, _, err := splitRef(ref); err == nil {
			t.Errorf("splitRef(%q) accepted", ref)
		}
	}
}

func TestNameFilter(t *testing.T) {
	type owned struct {
		name string
		uid  uint32
		user string
	}
	alice, bob, other := owned{"train", 1000, "alice"}, owned{"train", 1001, "bob"}, owned{"eval", 1000, "alice"}
	for ref, want := range map[string][]owned{
		"":            {alice, bob, other},
		"train":       {alice, bob},
		"alice/train": {alice},
		"1001/train":  {bob},
		"carol/train": nil,
	} {
		f, err := parseNameFilter(ref)
		if err != nil {
			t.Fatalf("parseNameFilter(%q): %v", ref, err)
		}
		var got []owned
		for _, o := range []owned{alice, bob, other} {
			if f.match(o.name, o.uid, o.user) {
				got = append(got, o)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("filter %q matches %v, want %v", ref, got, want)
		}
	}
}
