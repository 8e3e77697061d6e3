package cli

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// gpuLabel names GPUs by index, from their UUIDs; a nil gpuLabel, or a GPU
// the daemon no longer lists, keeps the UUID.
type gpuLabel map[string]int

// of is one GPU's name: "1", or its UUID.
func (l gpuLabel) of(uuid string) string {
	if i, ok := l[uuid]; ok {
		return strconv.Itoa(i)
	}
	return uuid
}

// list names GPUs in their order: "0,1".
func (l gpuLabel) list(uuids []string) string {
	s := make([]string, len(uuids))
	for i, uuid := range uuids {
		s[i] = l.of(uuid)
	}
	return strings.Join(s, ",")
}

// peaks shows peak memory per GPU, by index (UUIDs after, in order):
// "0: 17.2 GiB, 1: 512 MiB", or "-" for none.
func (l gpuLabel) peaks(m map[string]uint64) string {
	if len(m) == 0 {
		return "-"
	}
	uuids := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		ia, oka := l[a]
		ib, okb := l[b]
		switch {
		case oka && okb:
			return cmp.Compare(ia, ib)
		case oka != okb: // indexed first
			if oka {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	s := make([]string, len(uuids))
	for i, uuid := range uuids {
		s[i] = l.of(uuid) + ": " + mib(m[uuid])
	}
	return strings.Join(s, ", ")
}
