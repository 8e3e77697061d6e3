package listing

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// encodedSize is the bytes encoding/json writes for argv, the larger of
// with and without HTML escaping.
func encodedSize(t *testing.T, argv []string) int {
	t.Helper()
	html, err := json.Marshal(argv)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(argv); err != nil {
		t.Fatal(err)
	}
	return max(len(html), b.Len()-1)
}

func TestCut(t *testing.T) {
	long := strings.Repeat("x", 5000)
	for _, tc := range []struct {
		name  string
		argv  []string
		limit int
		want  []string
		cut   bool
	}{
		{"fits", []string{"python3", "train.py"}, 100, []string{"python3", "train.py"}, false},
		{"exactly", []string{"ab", "c"}, len(`["ab","c"]`), []string{"ab", "c"}, false},
		{"one byte short", []string{"ab", "c"}, len(`["ab","c"]`) - 1, []string{"ab"}, true},
		{"next argument cut", []string{"sh", long}, 20, []string{"sh", strings.Repeat("x", 20-len(`["sh",""]`))}, true},
		{"later arguments dropped", []string{"a", long, "b"}, 12, []string{"a", "xxxx"}, true},
		{"no room for another", []string{"abcdef", "g"}, len(`["abcdef"]`) + 2, []string{"abcdef"}, true},
		{"escapes counted", []string{"\"\"\"\""}, len(`["\"\"\""]`), []string{`"""`}, true},
		{"control characters", []string{"\x01\x01"}, 2 + 2 + 6, []string{"\x01"}, true},
		{"whole characters", []string{"ééé"}, 2 + 2 + 5, []string{"éé"}, true},
		{"html", []string{"a<b"}, 2 + 2 + 1 + 5, []string{"a"}, true},
		{"empty", []string{}, 2, []string{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cut := Cut(tc.argv, tc.limit)
			if !slices.Equal(got, tc.want) || cut != tc.cut {
				t.Fatalf("Cut(%.40q, %d) = %.40q, %v; want %.40q, %v", tc.argv, tc.limit, got, cut, tc.want, tc.cut)
			}
			if n := encodedSize(t, got); n > tc.limit {
				t.Errorf("cut argv encodes to %d bytes, over %d", n, tc.limit)
			}
		})
	}
}

// TestCutBoundsAnyCommand: whatever the characters, the cut command's
// encoding stays within the limit, and is a prefix of the command.
func TestCutBoundsAnyCommand(t *testing.T) {
	chars := []string{"a", "é", "\x00", "\n", "\"", "\\", "<", "\u2028", "\xff", "日本", " "}
	for i := range 200 {
		var argv []string
		for j := range 1 + i%7 {
			var b strings.Builder
			for k := range (i*31 + j*17) % 3000 {
				b.WriteString(chars[(i+j+k*k)%len(chars)])
			}
			argv = append(argv, b.String())
		}
		limit := 16 + i*37%6000
		got, cut := Cut(argv, limit)
		if n := encodedSize(t, got); n > limit {
			t.Fatalf("argv %d: cut to %d encoded bytes, over %d", i, n, limit)
		}
		if !cut {
			if !slices.Equal(got, argv) {
				t.Fatalf("argv %d: changed but not reported cut", i)
			}
			continue
		}
		last := len(got) - 1
		if !slices.Equal(got[:max(last, 0)], argv[:max(last, 0)]) || last >= 0 && !strings.HasPrefix(argv[last], got[last]) {
			t.Fatalf("argv %d: the cut is not a prefix of the command", i)
		}
	}
}

func TestKeepHoldsNothingOfTheWhole(t *testing.T) {
	long := strings.Repeat("y", 10000)
	argv := []string{"sh", long}
	kept, cut := Keep(argv, 100)
	want, _ := Cut(argv, 100)
	if !cut || !slices.Equal(kept, want) {
		t.Fatalf("Keep = %q, %v; want Cut's %q", kept, cut, want)
	}
	if unsafe.StringData(kept[0]) == unsafe.StringData(argv[0]) || unsafe.StringData(kept[1]) == unsafe.StringData(long) {
		t.Fatal("Keep's arguments share memory with the whole command")
	}
	if same, cut := Keep([]string{"true"}, 100); cut || !slices.Equal(same, []string{"true"}) {
		t.Fatalf("a command that fits: %q, cut %v", same, cut)
	}
}
