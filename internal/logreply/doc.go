// Package logreply encodes what the daemon sends of a log's tail, as its
// line writer would encode it, without a string for each line: the reply
// to a logs call (api.LogsResult, Encode), and the log events that a
// follow starts with (Events). The daemon encodes small replies and every
// follow's first events itself; a large reply is encoded by a log reader
// process (internal/logreader) in the caller's CPU cgroup, with the same
// code.
package logreply
