package api

import "encoding/json"

// ProtocolVersion is bumped on every incompatible change of the wire format.
const ProtocolVersion = 1

// MaxLineBytes bounds one request line; longer lines are refused with
// CodeTooLarge and skipped up to the next newline.
const MaxLineBytes = 1 << 20

// MaxIDBytes bounds a request's id, as it is on the line: the daemon echoes
// it in every line it answers, so an id of a MiB made each line of a
// stream a MiB. A request with a longer id is refused with CodeBadRequest,
// answered without its id.
const MaxIDBytes = 256

// DefaultSocket is where the daemon listens unless told otherwise.
const DefaultSocket = "/run/gpusched/gpusched.sock"

// SocketEnv names the environment variable that overrides DefaultSocket.
const SocketEnv = "GPUSCHED_SOCKET"

// Request is one call. ID is echoed verbatim in every line answering it.
type Request struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Response ends every call. Exactly one of Result (OK) or Error+Code is set.
type Response struct {
	ID     json.RawMessage `json:"id,omitempty"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Code   Code            `json:"code,omitempty"`
}

// StreamLine carries one event of a streaming call, before its Response.
type StreamLine struct {
	ID    json.RawMessage `json:"id,omitempty"`
	Event *Event          `json:"event"`
}

// Line is what a client reads: a StreamLine when Event is set, otherwise a
// Response.
type Line struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Event  *Event          `json:"event,omitempty"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Code   Code            `json:"code,omitempty"`
}
