package router

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/pkg/api"
)

const goodConfig = `api_keys = ["sk-test-12345678"]
start_timeout = "30s"

[models.alpha]
cmd = ["gpusched-simjob", "--http", "${PORT}", "--vram", "13312"]
port = 9001
gpus = [0]
vram = "13G"
ttl = "5m"
hibernate = "1h"
aliases = ["a", "first"]
preload = true

[models.beta]
cmd = ["server", "--port=${PORT}"]
port = 9002
health = "/ready"
`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig("r.toml", []byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Models["alpha"]
	if a.Port != 9001 || a.VRAMMiB != 13<<10 || a.TTL != 5*time.Minute || a.Hibernate != time.Hour ||
		!a.Preload || a.Health != "/health" || len(a.GPUs) != 1 || a.GPUs[0] != (api.GPURef{Index: 0}) {
		t.Errorf("alpha = %+v", a)
	}
	if got := strings.Join(a.Argv(), " "); got != "gpusched-simjob --http 9001 --vram 13312" {
		t.Errorf("argv = %q", got)
	}
	if got := c.Models["beta"].Argv()[1]; got != "--port=9002" {
		t.Errorf("beta argv[1] = %q", got)
	}
	if m, ok := c.Lookup("first"); !ok || m.Name != "alpha" {
		t.Errorf("alias first -> %v %v", m, ok)
	}
	if c.StartTimeout != 30*time.Second || len(c.APIKeys) != 1 || c.MaxBody != DefaultMaxBody {
		t.Errorf("globals = %v %v %v", c.StartTimeout, c.APIKeys, c.MaxBody)
	}
	if c.IdleTimeout != DefaultIdleTimeout || c.MaxConns != DefaultMaxConns || c.ConnsPerUser != DefaultConnsPerUser ||
		c.BodyBudget != DefaultBodyBudget || c.BodyPerUser != DefaultBodyPerUser {
		t.Errorf("connection and body defaults = %v %d %d %d %d", c.IdleTimeout, c.MaxConns, c.ConnsPerUser, c.BodyBudget, c.BodyPerUser)
	}
	if c.TurnTimeout != 15*time.Second {
		t.Errorf("turn_timeout under start_timeout 30s = %v, want half of it (15s)", c.TurnTimeout)
	}
	base := "[models.alpha]\ncmd = [\"x\"]\nport = 9001\n"
	for text, want := range map[string]time.Duration{base: DefaultTurnTimeout, "turn_timeout = \"3m\"\n" + base: 3 * time.Minute} {
		c, err := ParseConfig("r.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if c.TurnTimeout != want {
			t.Errorf("%q: turn_timeout %v; want %v", text, c.TurnTimeout, want)
		}
	}
}

// TestUnloadUsers: unload_users takes names and uids, and "*" for any
// client; without it only root and the router's own user may /unload.
func TestUsersLists(t *testing.T) {
	const base = "[models.alpha]\ncmd = [\"x\"]\nport = 9001\n"
	c, err := ParseConfig("r.toml", []byte("unload_users = [\"root\", \"4242\"]\nupstream_users = [\"4243\"]\n"+base))
	if err != nil {
		t.Fatal(err)
	}
	if u := c.UnloadUsers; len(u.UIDs) != 2 || u.UIDs[0] != 0 || u.UIDs[1] != 4242 || u.Anyone {
		t.Errorf("unload_users [root, 4242] = %+v", u)
	}
	u := c.UnloadUsers
	if !u.allows(4242) || u.allows(4243) || u.allows(limits.AnyPeer) || !u.allows(uint32(os.Getuid())) {
		t.Errorf("listed 4242, unlisted 4243, unknown peer, own user: %v %v %v %v",
			u.allows(4242), u.allows(4243), u.allows(limits.AnyPeer), u.allows(uint32(os.Getuid())))
	}
	if u := c.UpstreamUsers; !u.allows(4243) || u.allows(4242) || !u.allows(0) {
		t.Errorf("upstream_users [4243] = %+v: its own list, root always", u)
	}
	c, err = ParseConfig("r.toml", []byte("unload_users = [\"*\"]\n"+base))
	if err != nil {
		t.Fatal(err)
	}
	if u := c.UnloadUsers; !u.allows(4243) || !u.allows(limits.AnyPeer) {
		t.Errorf("unload_users [*]: uid 4243 %v, unknown peer %v; want both allowed", u.allows(4243), u.allows(limits.AnyPeer))
	}
	if c.UpstreamUsers.allows(4243) {
		t.Error("upstream_users unset: uid 4243 allowed")
	}
}

// TestParseConfigErrors: each bad config is refused with the file, the
// line and the key in its error.
func TestParseConfigErrors(t *testing.T) {
	const base = "[models.alpha]\ncmd = [\"x\"]\nport = 9001\n"
	for _, tc := range []struct{ name, text, want string }{
		{"unknown model key", base + "ttll = \"5m\"\n", `r.toml:4: models.alpha.ttll: unknown key`},
		{"unknown global key", "listen = \"x\"\n" + base, `r.toml:1: listen: unknown key`},
		{"bad duration", base + "ttl = \"5 minutes\"\n", `r.toml:4: models.alpha.ttl: bad duration "5 minutes"`},
		{"duration not a string", base + "hibernate = 5\n", `r.toml:4: models.alpha.hibernate: want a duration such as "5m", not the integer 5`},
		{"ttl too short", base + "ttl = \"1ms\"\n", `r.toml:4: models.alpha.ttl: duration "1ms": must be at least 1s`},
		{"missing cmd", "[models.alpha]\nport = 9001\n", `r.toml:2: [models.alpha]: cmd is missing`},
		{"missing port", "[models.alpha]\ncmd = [\"x\"]\n", `r.toml:2: [models.alpha]: port is missing`},
		{"bad port", base + "[models.beta]\ncmd = [\"x\"]\nport = 70000\n", `r.toml:6: models.beta.port: want a port number 1-65535, not the integer 70000`},
		{"port clash", base + "[models.beta]\ncmd = [\"y\"]\nport = 9001\n", `r.toml:6: models.beta.port: port 9001 is already model "alpha"'s`},
		{"duplicate alias", base + "aliases = [\"a\"]\n[models.beta]\ncmd = [\"y\"]\nport = 9002\naliases = [\"a\"]\n", `r.toml:8: models.beta.aliases: duplicate alias "a" (also model "alpha"'s)`},
		{"alias is a model", base + "aliases = [\"beta\"]\n[models.beta]\ncmd = [\"y\"]\nport = 9002\n", `r.toml:4: models.alpha.aliases: alias "beta" is the name of a model`},
		{"alias twice in a model", base + "aliases = [\"a\", \"a\"]\n", `r.toml:4: models.alpha.aliases: duplicate alias "a"`},
		{"bad vram", base + "vram = \"13\"\n", `r.toml:4: models.alpha.vram: size "13" has no unit`},
		{"bad gpu", base + "gpus = [-1]\n", `r.toml:4: models.alpha.gpus: item 1: GPU index -1 is negative`},
		{"bad health", base + "health = \"health\"\n", `r.toml:4: models.alpha.health: want a path starting with /`},
		{"bad name", "[models.\"a b\"]\ncmd = [\"x\"]\nport = 9001\n", `r.toml:2: [models.a b]: the model's name is its process name`},
		{"empty cmd", "[models.alpha]\ncmd = []\nport = 9001\n", `r.toml:2: models.alpha.cmd: empty argv`},
		{"short api key", "api_keys = [\"k\"]\n" + base, `r.toml:1: api_keys: item 1: an api key must be at least 8 characters`},
		{"bad toml", base + "port = = 3\n", `r.toml:4: bad TOML`},
		{"no models", "start_timeout = \"1m\"\n", `r.toml: no [models.NAME] table`},
		{"few conns", "max_conns = 8\n" + base, `r.toml:1: max_conns: want a whole number 16-1048576, not the integer 8`},
		{"conns per user not a number", "max_conns_per_user = \"many\"\n" + base, `r.toml:1: max_conns_per_user: want a whole number 0-1048576`},
		{"body budget below max_body", "max_body = \"512M\"\n" + base, `r.toml: body_budget (1024 MiB) must hold body_budget_per_user (256 MiB), and that one max_body (512 MiB)`},
		{"turn as long as a start", "turn_timeout = \"5m\"\n" + base, `r.toml: turn_timeout (5m0s) must be shorter than start_timeout (5m0s)`},
		{"short idle", "idle_timeout = \"10ms\"\n" + base, `r.toml:1: idle_timeout:`},
		{"short model key", "model_key = \"short\"\n" + base, `r.toml:1: model_key: want a string of at least 16 characters`},
		{"key env without key", base + "model_key_env = \"LLAMA_API_KEY\"\n", `r.toml:4: models.alpha.model_key_env: there is no model_key to pass in it`},
		{"bad key env", "model_key = \"sk-model-0123456789\"\n" + base + "model_key_env = \"1 BAD\"\n", `r.toml:5: models.alpha.model_key_env: want an environment variable's name`},
		{"unknown unloader", "unload_users = [\"no-such-user-here\"]\n" + base, `r.toml:1: unload_users: item 1: no local user "no-such-user-here"`},
		{"unloaders not a list", "unload_users = \"root\"\n" + base, `r.toml:1: unload_users: want a list of strings`},
		{"unknown upstream user", "upstream_users = [\"no-such-user-here\"]\n" + base, `r.toml:1: upstream_users: item 1: no local user "no-such-user-here"`},
		{"negative slots", base + "slots = -1\n", `r.toml:4: models.alpha.slots: want a number of requests 0-65536 (0: no bound), not the integer -1`},
		{"slots not a number", base + "slots = \"4\"\n", `r.toml:4: models.alpha.slots: want a number of requests`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("r.toml", []byte(tc.text))
			if err == nil {
				t.Fatalf("no error; config %+v", c)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n  %v\nwant it to contain:\n  %s", err, tc.want)
			}
		})
	}
}

func TestLoadConfigBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.toml")
	if err := os.WriteFile(path, []byte(strings.Repeat("#", maxConfigBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v", err)
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "none.toml")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

// TestSlotsFromTheServersFlags: a model's slots, where not set, are what
// its server's argv gives it: llama-server's -np or --parallel, vLLM's
// --max-num-seqs, the last one given; a llama-server given none has the
// number of LLAMA_ARG_N_PARALLEL set before it, else (or -1) the four it
// then picks itself; another server given none, or a
// number that is not one, bounds nothing.
func TestSlotsFromTheServersFlags(t *testing.T) {
	for _, tc := range []struct {
		argv string
		want int
	}{
		{"llama-server -m m.gguf --port ${PORT} -np 4", 4},
		{"llama-server --parallel 8 -c 8192", 8},
		{"llama-server --parallel=2", 2},
		{"llama-server -np -1", 4},
		{"/opt/llama.cpp/bin/llama-server -m m.gguf --port ${PORT}", 4},
		{"numactl -N 0 llama-server -m m.gguf", 4},
		{"llama-server -np 2 -np -1", 4},
		{"vllm serve m --max-num-seqs -1", 0},
		{"./my-llama-server -m m.gguf", 0},
		{"env LLAMA_ARG_N_PARALLEL=8 llama-server -m m.gguf", 8},
		{"env LLAMA_ARG_N_PARALLEL=-1 llama-server", 4},
		{"env LLAMA_ARG_N_PARALLEL=8 llama-server -np 2", 2},
		{"llama-server LLAMA_ARG_N_PARALLEL=8", 4},
		{"env LLAMA_ARG_N_PARALLEL=8 vllm serve m", 0},
		{"llama-server -np 4 -np 6", 6},
		{"vllm serve m --max-num-seqs 64", 64},
		{"vllm serve m --max-num-seqs=16", 16},
		{"llama-server -m m.gguf", 4},
		{"llama-server -np", 4},
		{"llama-server -np many", 0},
		{"server --parallelism 3", 0},
	} {
		if got := serverSlots(strings.Fields(tc.argv)); got != tc.want {
			t.Errorf("slots of %q = %d, want %d", tc.argv, got, tc.want)
		}
	}
	c, err := ParseConfig("r.toml", []byte(`[models.alpha]
cmd = ["llama-server", "-np", "4"]
port = 9001
[models.beta]
cmd = ["llama-server", "-np", "4"]
port = 9002
slots = 0
[models.gamma]
cmd = ["vllm", "serve", "m"]
port = 9003
slots = 32
`))
	if err != nil {
		t.Fatal(err)
	}
	if a, b, g := c.Models["alpha"].Slots, c.Models["beta"].Slots, c.Models["gamma"].Slots; a != 4 || b != 0 || g != 32 {
		t.Errorf("slots = %d, %d, %d; want 4 (its -np), 0 (set), 32 (set)", a, b, g)
	}
	if c.Models["alpha"].SlotsSet || !c.Models["beta"].SlotsSet {
		t.Error("slots set: alpha's read from its cmd, beta's from the config")
	}
}
