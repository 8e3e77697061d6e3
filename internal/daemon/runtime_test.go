package daemon

import "testing"

// TestRuntimesRemoveKeepsNewerTree: the watcher of a dumped tree, ending
// after a restore registered the record's next tree, leaves that one.
func TestRuntimesRemoveKeepsNewerTree(t *testing.T) {
	r := newRuntimes()
	dumped := r.add("id", 100, -1, false)
	restored := r.add("id", 200, -1, true)
	r.remove(dumped)
	if got := r.get("id"); got != restored {
		t.Fatalf("after the dumped tree's removal: %v, want the restored tree's runtime", got)
	}
	r.remove(restored)
	if got := r.get("id"); got != nil {
		t.Fatalf("after the restored tree's removal: %v, want none", got)
	}
}
