package memfill

// The protocol: JSON lines. On every (re)connection the helper first writes
// a hello line, {"hello":{...},"state":{...}}. The controller then sends
// requests, {"id":N,"op":"set","target_mib":T,"reserve_mib":R},
// {"id":N,"op":"status"} or {"id":N,"op":"release"}, answered in order by
// {"id":N,"state":{...}} or {"id":N,"error":"..."} (a bad line changes
// nothing). A set is applied at once, releasing synchronously: its reply
// means the memory is free, or the filler holds nothing more to give. After
// answering release the helper has freed everything, and it exits. Between
// replies the helper writes {"state":{...}} (no id) whenever its hold
// changes, and {"error":"...","code":"superseded"} before it drops a
// controller for a newer one. A helper that cannot start writes one
// {"error":"...","code":...} line instead of its hello, and exits.

// Requests.
const (
	opSet     = "set"
	opStatus  = "status"
	opRelease = "release"
)

// Codes of helper error lines.
const (
	codeUnsupported = "unsupported" // the backend is absent (ErrUnsupported)
	codeFailed      = "failed"      // the helper could not start
	codeSuperseded  = "superseded"  // a newer controller took over
)

// maxLine bounds one protocol line.
const maxLine = 64 << 10

// State is a filler's state as its helper reports it.
type State struct {
	HeldMiB    uint64 `json:"held_mib"`    // the filler's own allocation
	FreeMiB    uint64 `json:"free_mib"`    // the device's free memory, all processes
	TotalMiB   uint64 `json:"total_mib"`   // the device's memory
	TargetMiB  uint64 `json:"target_mib"`  // total usage it holds the device at
	ReserveMiB uint64 `json:"reserve_mib"` // kept free on top of what the target leaves
	Error      string `json:"error"`       // the last pass's allocation or backend failure; "" if none
	Seq        uint64 `json:"seq"`         // increases with every state the helper reports
}

// hello introduces the helper on a new connection.
type hello struct {
	PID      int    `json:"pid"`   // host pid
	Start    uint64 `json:"start"` // process start time, clock ticks after boot
	Backend  string `json:"backend"`
	UUID     string `json:"uuid"`
	ChunkMiB uint64 `json:"chunk_mib"`
}

// request is one controller line.
type request struct {
	ID         uint64  `json:"id"`
	Op         string  `json:"op"`
	TargetMiB  *uint64 `json:"target_mib,omitempty"`
	ReserveMiB *uint64 `json:"reserve_mib,omitempty"`
}

// message is one helper line.
type message struct {
	ID    uint64 `json:"id,omitempty"`
	Hello *hello `json:"hello,omitempty"`
	State *State `json:"state,omitempty"`
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}
