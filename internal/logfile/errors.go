package logfile

import "errors"

// ErrInvalidArgument means a negative keep count.
var ErrInvalidArgument = errors.New("invalid argument")

// errShrunk means a file became shorter while it was being read, because a
// rotation truncated it.
var errShrunk = errors.New("file shrank while reading")

// errWatchEnded means a follower's watch ended before it did: the Watcher
// was closed, or the kernel dropped the watch.
var errWatchEnded = errors.New("watch ended")
