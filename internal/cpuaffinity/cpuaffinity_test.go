package cpuaffinity

import "testing"

func TestParseAndFormat(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0", "0"},
		{"0-3", "0-3"},
		{"0-3,8", "0-3,8"},
		{" 2 , 0-1 ", "0-2"},
		{"5,3,4", "3-5"},
		{"1023", "1023"},
		{"0,2,4-6", "0,2,4-6"},
	} {
		set, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := Format(set); got != tc.want {
			t.Errorf("Format(Parse(%q)) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", " ", "a", "-1", "3-1", "1-", "0,,1", "1024", "0-1024", "1.5"} {
		if set, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %s, want an error", bad, Format(set))
		}
	}
}

func TestWithout(t *testing.T) {
	for _, tc := range []struct{ from, apart, want string }{
		{"0-15", "0-1", "2-15"},
		{"0-3", "2", "0-1,3"},
		{"0-3", "8", "0-3"},
		{"0-1", "0-1", "0-1"}, // nothing would be left: all of it
		{"0", "0", "0"},
	} {
		from, _ := Parse(tc.from)
		apart, _ := Parse(tc.apart)
		if got := Format(without(from, apart)); got != tc.want {
			t.Errorf("without(%s, %s) = %s, want %s", tc.from, tc.apart, got, tc.want)
		}
	}
}
