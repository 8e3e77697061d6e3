package api

// ListCmdBytes bounds each record's command in a listing (ps, jobs, rm of
// several names or of every exited process, prune_jobs): Cmd, as its JSON
// array is encoded, takes at most this many bytes. A longer one is cut to
// its first arguments whole and the next one's longest prefix that fits,
// with CmdTruncated set; status (a process) and job (a job) of one name
// return the whole command. A process's record keeps its command cut so
// too (the other replies and events that carry a process have it cut).
const ListCmdBytes = 4096
