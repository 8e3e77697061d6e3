package api

import "testing"

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 copies"}, {1, "1 copy"}, {2, "2 copies"}} {
		if got := Plural(tc.n, "copy", "copies"); got != tc.want {
			t.Errorf("Plural(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
