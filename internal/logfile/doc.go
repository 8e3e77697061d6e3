// Package logfile owns the log file of each managed process: opening it for
// the process, capping its size, reading its end, and following it.
//
// A managed process writes its stdout and stderr straight into its log file
// through an O_APPEND descriptor that the daemon opened and the process
// inherited; the daemon never sits in a pipe, so it can restart, and CRIU can
// restore the process by reopening the file by path. The size cap therefore
// works by copy-truncate in place (logrotate's copytruncate): [Rotate] copies
// the file to path.1 (older copies shift to path.2 … path.keep) and truncates
// the file to zero; the process keeps its descriptor, and because of O_APPEND
// its next write lands at offset 0, with no sparse hole. Bytes the process
// writes between the copy and the truncation are lost, as with copytruncate.
// [Empty] truncates a log the same way, to hold many logs to one budget.
//
// [Tail] reads the last lines backwards from the end, continuing into the
// rotated copies; [TailForFollow] and [Follow] hand over at a byte offset so
// that a tail followed by a follow neither repeats nor skips a line. Every
// Follow sleeps on one shared [Watcher]: one inotify instance for the whole
// daemon, with one watch per followed file.
//
// Lines are split at '\n'. A line longer than [MaxLine] bytes is cut to its
// first MaxLine bytes followed by [CutMarker]; so is a line whose start was
// not read. File boundaries end lines: a line split by a rotation reads as
// two in [Tail].
//
// The content of a log is the process's to choose (a line of gigabytes, a
// hole of terabytes made by ftruncate), so every read is bounded: Tail reads
// at most the last [MaxTail] bytes and returns at most [MaxTailLines] lines
// of them, Follow never holds more than a line of MaxLine bytes and skips
// ahead when more than [MaxLag] bytes behind, and both stop at the end of
// their context.
//
// Every open refuses a symbolic link as the final path component, since the
// daemon runs as root and the paths may sit where users can write.
package logfile
