package logbudget

import (
	"slices"
	"testing"
	"time"
)

func TestSelect(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cur := func(p string, n int64) File { return File{Path: p, Current: true, Bytes: n, Mod: t0} }
	old := func(p string, n int64, age time.Duration) File {
		return File{Path: p, Bytes: n, Mod: t0.Add(-age)}
	}
	for _, tc := range []struct {
		name   string
		budget int64
		files  []File
		want   []string
	}{
		{"nothing", 100, nil, nil},
		{"within", 100, []File{cur("a", 60), old("a.1", 40, time.Minute)}, nil},
		{"rotated copies go first, the oldest first", 100,
			[]File{cur("a", 40), old("a.1", 50, time.Minute), cur("b", 10), old("b.1", 50, time.Hour)},
			[]string{"b.1"}},
		{"then both copies", 100,
			[]File{cur("a", 90), old("a.1", 50, time.Minute), cur("b", 10), old("b.1", 40, time.Hour)},
			[]string{"b.1", "a.1"}},
		{"then the largest logs", 100,
			[]File{cur("a", 30), old("a.1", 50, time.Minute), cur("b", 70), cur("c", 60)},
			[]string{"a.1", "b"}},
		{"every log when one alone is over", 10,
			[]File{cur("a", 30), cur("b", 20)},
			[]string{"a", "b"}},
		{"empty files are not cut", 10,
			[]File{cur("a", 0), old("a.1", 0, time.Hour), cur("b", 20)},
			[]string{"b"}},
		{"of equal sizes, the first given", 50,
			[]File{cur("a", 30), cur("b", 30)},
			[]string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range Select(tc.budget, tc.files) {
				got = append(got, f.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Select(%d) cuts %v, want %v", tc.budget, got, tc.want)
			}
		})
	}
}

// TestSelectBringsWithinBudget checks, over many mixes, that what is left
// after the cuts is within the budget and that no cut was needless: without
// the last cut the files would still be over it.
func TestSelectBringsWithinBudget(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for seed := range 500 {
		var files []File
		var held int64
		for i := range seed%9 + 1 {
			n := int64((seed*7919 + i*104729) % 1000)
			files = append(files, File{Path: string(rune('a' + i)), Current: (seed+i)%3 != 0, Bytes: n,
				Mod: t0.Add(time.Duration(-(seed*31+i*17)%600) * time.Second)})
			held += n
		}
		budget := int64(seed * 13 % 2500)
		cut := Select(budget, files)
		var freed int64
		for _, f := range cut {
			freed += f.Bytes
		}
		if held-freed > budget {
			t.Fatalf("seed %d: %d left of %d, budget %d", seed, held-freed, held, budget)
		}
		if len(cut) > 0 && held-freed+cut[len(cut)-1].Bytes <= budget {
			t.Fatalf("seed %d: the last cut was not needed (%v)", seed, cut)
		}
	}
}
