package gpu

import (
	"slices"
	"strings"
	"testing"
)

func TestParseSimSpec(t *testing.T) {
	for _, tc := range []struct {
		in      string
		count   int
		size    uint64
		wantErr string
	}{
		{in: "1", count: 1, size: 24576},
		{in: " 8 ", count: 8, size: 24576},
		{in: "4x80G", count: 4, size: 81920},
		{in: "4X80GiB", count: 4, size: 81920},
		{in: "2x24g", count: 2, size: 24576},
		{in: "2x40GB", count: 2, size: 40960},
		{in: "1x16384M", count: 1, size: 16384},
		{in: "1x1024MiB", count: 1, size: 1024},
		{in: "1x1G", count: 1, size: 1024},
		{in: "1x1T", count: 1, size: 1 << 20},
		{in: "1x1048576mib", count: 1, size: 1 << 20},
		{in: "64", count: 64, size: 24576},
		{in: "", wantErr: "not a number"},
		{in: "0", wantErr: "1 to 64"},
		{in: "-2", wantErr: "1 to 64"},
		{in: "65", wantErr: "1 to 64"},
		{in: "two", wantErr: "not a number"},
		{in: "x24G", wantErr: "not a number"},
		{in: "2x", wantErr: "needs a unit"},
		{in: "2x24", wantErr: "needs a unit"},
		{in: "2x24Q", wantErr: "unknown unit"},
		{in: "2xG", wantErr: "not a whole number"},
		{in: "2x1.5G", wantErr: "not a whole number"},
		{in: "2x-1G", wantErr: "not a whole number"},
		{in: "1x512MiB", wantErr: "under 1 GiB"},
		{in: "1x0G", wantErr: "under 1 GiB"},
		{in: "1x2T", wantErr: "over 1 TiB"},
		{in: "1x1048577M", wantErr: "over 1 TiB"},
		{in: "1x99999999999999999999G", wantErr: "not a whole number"},
		{in: "1x18014398509481984G", wantErr: "too large"},
	} {
		spec, err := ParseSimSpec(tc.in)
		count, size := spec.Count, spec.SizeMiB
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSimSpec(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || count != tc.count || size != tc.size {
			t.Errorf("ParseSimSpec(%q) = %d, %d, %v; want %d, %d", tc.in, count, size, err, tc.count, tc.size)
		}
	}
}

func TestParseSimSpecMIG(t *testing.T) {
	spec, err := ParseSimSpec("4x80G:mig=3,1")
	if err != nil || spec.Count != 4 || spec.SizeMiB != 81920 || !slices.Equal(spec.MIG, []int{1, 3}) {
		t.Errorf("ParseSimSpec = %+v, %v; want 4 GPUs of 80 GiB, 1 and 3 in MIG mode", spec, err)
	}
	if spec, err := ParseSimSpec("2:MIG=0"); err != nil || !slices.Equal(spec.MIG, []int{0}) {
		t.Errorf("ParseSimSpec(2:MIG=0) = %+v, %v", spec, err)
	}
	for in, want := range map[string]string{
		"2:mig=2":    "GPU 2 does not exist",
		"2:mig=0,0":  "named twice",
		"2:mig=":     "not a number",
		"2:mig=a":    "not a number",
		"2:shared=1": "unknown option",
	} {
		if _, err := ParseSimSpec(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSimSpec(%q) error = %v, want one containing %q", in, err, want)
		}
	}
}

func TestParseSimSpecReservedContext(t *testing.T) {
	spec, err := ParseSimSpec("2x140G:reserved=616M")
	if err != nil || spec.Count != 2 || spec.SizeMiB != 143360 || spec.ReservedMiB != 616 || spec.MIG != nil {
		t.Errorf("ParseSimSpec = %+v, %v; want 2 GPUs of 140 GiB, 616 MiB reserved", spec, err)
	}
	spec, err = ParseSimSpec("4x80G:mig=1:RESERVED=1G:context=518M")
	if err != nil || spec.ReservedMiB != 1024 || spec.ContextMiB != 518 || !slices.Equal(spec.MIG, []int{1}) {
		t.Errorf("ParseSimSpec(mig and reserved) = %+v, %v", spec, err)
	}
	if spec, err := ParseSimSpec("2x24G"); err != nil || spec.ReservedMiB != 0 {
		t.Errorf("ParseSimSpec(2x24G) = %+v, %v; want nothing reserved", spec, err)
	}
	for in, want := range map[string]string{
		"1x1G:reserved=1G":          "leaves nothing",
		"1x1G:reserved=2G":          "leaves nothing",
		"1:reserved=":               "not a whole number",
		"1:reserved=5Q":             "unknown unit",
		"1:reserved=1M:reserved=2M": "given twice",
		"2:mig=0:mig=1":             "given twice",
		"1:reserved":                "not a whole number",
	} {
		if _, err := ParseSimSpec(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSimSpec(%q) error = %v, want one containing %q", in, err, want)
		}
	}
}
