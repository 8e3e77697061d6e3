package treefiles

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// watchLinks are what /proc shows an inotify or fanotify descriptor as.
var watchLinks = map[string]bool{"anon_inode:inotify": true, "anon_inode:[fanotify]": true}

// maxFdinfo bounds what is read of one descriptor's fdinfo: a line per
// watch (inotify's are limited per user, 8192 by default).
const maxFdinfo = 4 << 20

// watchesOf lists the watches an inotify or fanotify descriptor holds
// (/proc/PID/fdinfo/N: "inotify wd:1 ino:3c4a3 sdev:fe00000 ...",
// "fanotify ino:ba23c sdev:800001 ..."), each as the identity of the inode
// watched, keyed by the descriptor's key and the watch: CRIU re-adds each
// watch by its path (criu/fsnotify.c keeps the path it found), as root,
// on whatever that path leads to at the restore. A mark on a mount or a
// filesystem (root's alone to place) is left out.
func watchesOf(key, fdinfo string) ([]Identity, error) {
	f, err := os.Open(fdinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), maxFdinfo)
	var out []Identity
	for sc.Scan() {
		kind, rest, ok := strings.Cut(sc.Text(), " ")
		if !ok || kind != "inotify" && kind != "fanotify" {
			continue
		}
		fields := map[string]string{}
		for _, f := range strings.Fields(rest) {
			if k, v, ok := strings.Cut(f, ":"); ok {
				fields[k] = v
			}
		}
		ino, err1 := strconv.ParseUint(fields["ino"], 16, 64)
		sdev, err2 := strconv.ParseUint(fields["sdev"], 16, 64)
		if err1 != nil || err2 != nil {
			continue // a mount's or a filesystem's mark
		}
		name := "ino/" + fields["ino"]
		if wd, ok := fields["wd"]; ok {
			name = "wd/" + wd
		}
		out = append(out, Identity{Key: key + "/" + name, Type: watchType, Dev: sdev, Ino: ino, nlink: 1})
	}
	return out, sc.Err()
}

// watchType marks a watch's identity: the inode's type is not in fdinfo.
const watchType = 1
