// Package logreply encodes the reply to a logs call (api.LogsResult) from
// the bytes of a log's tail, as the daemon's line writer would encode it,
// without a string for each line. The daemon encodes small replies itself;
// a large one is encoded by a log reader process (internal/logreader) in
// the caller's CPU cgroup, with the same code.
package logreply
