package logbudget

import (
	"cmp"
	"slices"
	"time"
)

// File is one file of a user's live logs on disk.
type File struct {
	Path    string
	Current bool // the log a process writes, not a rotated copy
	Bytes   int64
	Mod     time.Time
	log     int // the Log it belongs to, in a Keeper's pass
}

// Select returns the files to cut, in the order to cut them, so that what
// files hold together comes to at most budget: rotated copies first, the
// oldest first, then the logs being written, the largest first. A rotated
// copy cut is removed, a log emptied. Nothing when they are within it.
func Select(budget int64, files []File) []File {
	var held int64
	for _, f := range files {
		held += f.Bytes
	}
	if held <= budget {
		return nil
	}
	order := slices.Clone(files)
	slices.SortStableFunc(order, func(a, b File) int {
		switch {
		case a.Current != b.Current:
			if a.Current {
				return 1
			}
			return -1
		case a.Current:
			return cmp.Compare(b.Bytes, a.Bytes)
		default:
			return a.Mod.Compare(b.Mod)
		}
	})
	var cut []File
	for _, f := range order {
		if held <= budget {
			break
		}
		if f.Bytes == 0 {
			continue
		}
		cut = append(cut, f)
		held -= f.Bytes
	}
	return cut
}
