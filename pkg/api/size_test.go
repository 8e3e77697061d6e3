package api

import (
	"strings"
	"testing"
)

func TestParseMiB(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		err  string
	}{
		{"0", 0, ""},
		{"64", 64, ""},
		{"18000", 18000, ""},
		{"10M", 10, ""},
		{"1mib", 1, ""},
		{"18G", 18 << 10, ""},
		{" 2TiB ", 2 << 20, ""},
		{"0G", 0, ""},
		{"10", 0, `size "10" has no unit: did you mean 10G? (a number alone is MiB: write 10M for 10 MiB)`},
		{"63", 0, `size "63" has no unit: did you mean 63G?`},
		{"1", 0, `did you mean 1G?`},
		{"1.5G", 0, `size "1.5G" is not a whole number with an optional unit (M, G or T)`},
		{"10Q", 0, `size "10Q": unknown unit "q" (want M, G or T)`},
		{"", 0, `size "" is not a whole number`},
		{"17592186044417", 0, `is too large`},
	} {
		got, err := ParseMiB(tt.in)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseMiB(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseMiB(%q) = %d, %v; want an error with %q", tt.in, got, err, tt.err)
		}
	}
}

func TestParseVRAMNoUnit(t *testing.T) {
	_, err := ParseVRAM("10")
	want := `vram: size "10" has no unit: did you mean 10G? (a number alone is MiB: write 10M for 10 MiB)`
	if err == nil || err.Error() != want {
		t.Errorf("ParseVRAM(10): %v; want %s", err, want)
	}
	if v, err := ParseVRAM("10M"); err != nil || v.MiB != 10 {
		t.Errorf("ParseVRAM(10M) = %+v, %v", v, err)
	}
}
