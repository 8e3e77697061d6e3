// Package api defines the gpusched wire protocol: the JSON-lines envelope,
// method names, parameter and result types, error codes and the protocol
// version, plus a Go client that speaks it. It imports only the standard
// library so that every other package (and external tools) may depend on it.
//
// One request or response is one JSON object on one line. A request is
//
//	{"id": 1, "method": "status", "params": {...}}
//
// and its response is {"id": 1, "ok": true, "result": {...}} or
// {"id": 1, "ok": false, "error": "...", "code": "not_found"}. Streaming
// methods first send any number of {"id": 1, "event": {...}} lines and end
// with one ordinary response line.
package api
