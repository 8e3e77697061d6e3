package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// Version is gpuschedctl's version, set at build time with
// -ldflags "-X github.com/gpusched/gpusched/internal/cli.Version=v1.2.3".
var Version = "dev"

// newVersionCmd builds `version`.
func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the client's and the daemon's versions",
		Long: `Print this client's version and the daemon's hello: its version, protocol,
backend, capabilities and who it sees calling. With --json it prints
{"client": VERSION, "daemon": HELLO}.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := a.hello(cmd.Context())
			if err != nil {
				if !a.json {
					fmt.Fprintf(a.stdout, "client:  %s\n", clientVersion())
				}
				return err
			}
			if a.json {
				b, err := json.Marshal(struct {
					Client string          `json:"client"`
					Daemon json.RawMessage `json:"daemon"`
				}{Version, raw})
				if err != nil {
					return fmt.Errorf("daemon sent invalid JSON: %w", err)
				}
				return writeJSON(a.stdout, b)
			}
			var h api.Hello
			if err := json.Unmarshal(raw, &h); err != nil {
				return fmt.Errorf("decode hello result: %w", err)
			}
			return writeVersion(a.stdout, &h)
		},
	}
}

// versions prints gpuschedctl's version and, when it answers, the daemon's;
// a daemon out of reach is a line, not a failure.
func (a *app) versions(ctx context.Context) error {
	raw, err := a.hello(ctx)
	reason := ""
	if err != nil {
		reason = err.Error()
		if u := (*unreachableError)(nil); errors.As(err, &u) {
			reason = u.what
		}
	}
	if a.json {
		b, err := json.Marshal(struct {
			Client string          `json:"client"`
			Daemon json.RawMessage `json:"daemon"`
			Error  string          `json:"error,omitempty"`
		}{Version, raw, reason})
		if err != nil {
			return fmt.Errorf("daemon sent invalid JSON: %w", err)
		}
		return writeJSON(a.stdout, b)
	}
	fmt.Fprintf(a.stdout, "gpuschedctl %s\n", clientVersion())
	if err != nil {
		_, err := fmt.Fprintf(a.stdout, "gpuschedd: not reached (%s)\n", reason)
		return err
	}
	var h api.Hello
	if err := json.Unmarshal(raw, &h); err != nil {
		return fmt.Errorf("decode hello result: %w", err)
	}
	_, err = fmt.Fprintf(a.stdout, "gpuschedd %s (protocol %d) at %s\n", h.Version, h.Protocol, api.SocketPath(a.socket))
	return err
}

// hello asks the daemon to describe itself.
func (a *app) hello(ctx context.Context) (json.RawMessage, error) {
	c, err := a.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var raw json.RawMessage
	return raw, c.Call(ctx, api.MethodHello, nil, &raw)
}

// clientVersion is "dev (protocol 1)".
func clientVersion() string {
	return fmt.Sprintf("%s (protocol %d)", Version, api.ProtocolVersion)
}

// writeVersion prints the client's version and the daemon's hello.
func writeVersion(w io.Writer, h *api.Hello) error {
	t := newTable(w)
	proto := fmt.Sprintf("protocol %d", h.Protocol)
	if h.Protocol != api.ProtocolVersion {
		proto += fmt.Sprintf(", this client speaks %d", api.ProtocolVersion)
	}
	fmt.Fprintf(t, "client:\t%s\n", clientVersion())
	fmt.Fprintf(t, "daemon:\t%s (%s)\n", h.Version, proto)
	fmt.Fprintf(t, "backend:\t%s\n", h.Backend)
	fmt.Fprintf(t, "capabilities:\t%s\n", strings.Join(h.Capabilities, ", "))
	if h.CRIU != "" {
		fmt.Fprintf(t, "criu:\t%s\n", h.CRIU)
	}
	fmt.Fprintf(t, "caller:\t%s\n", who(h.Caller.User, h.Caller.UID, h.Caller.GID))
	for _, why := range h.ExcludedGPUs {
		fmt.Fprintf(t, "excluded:\t%s\n", why)
	}
	return t.Flush()
}
