package router

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/gpusched/gpusched/internal/tomlline"
	"github.com/gpusched/gpusched/pkg/api"
)

// Config is the router's file: global settings and one Model per
// [models.NAME] table.
type Config struct {
	Path          string
	APIKeys       []string      // accepted as "Authorization: Bearer K" or "x-api-key: K"; none: no auth
	MaxBody       int64         // bytes of a request body read to find its model
	BodyBudget    int64         // bytes of bodies held whole at once, all requests together
	BodyPerUser   int64         // of those, one local user's (at least MaxBody)
	StartTimeout  time.Duration // longest a cold start may take to answer health
	IdleTimeout   time.Duration // a kept-alive connection with no new request for this long is closed
	TurnTimeout   time.Duration // a held model's requests' time to finish once another model waits for its GPUs
	MaxConns      int           // connections open at once; more wait in the kernel's backlog
	ConnsPerUser  int           // of those, what one local user holds (its peer's uid); 0: no share
	UnloadUsers   Users         // local users who may /unload, besides root and the router's own
	UpstreamUsers Users         // local users who may use every path of /upstream/, besides root and the router's own
	ModelKey      string        // sent to every model server as its bearer key; "": none
	Models        map[string]*Model
	aliases       map[string]string // alias -> model
}

// Model is one [models.NAME] table.
type Model struct {
	Name      string
	Cmd       []string // argv, ${PORT} substituted
	Port      int
	GPUs      []api.GPURef // none: every GPU
	VRAMMiB   uint64       // per GPU; what a cold start needs free
	Health    string       // path polled after a cold start until it answers 200
	TTL       time.Duration
	Hibernate time.Duration
	Aliases   []string
	Preload   bool
	KeyEnv    string // the environment variable its server reads ModelKey from; "": none
	// Slots is how many requests its server is passed at once, the rest
	// waiting in the router, shared fairly between users; 0: no bound.
	Slots int
	// SlotsSet says the config sets Slots; otherwise it is read from Cmd
	// and replaced by the number the server gives once it answers one.
	SlotsSet bool
}

// Defaults of the optional settings.
const (
	DefaultHealth       = "/health"
	DefaultMaxBody      = 32 << 20
	DefaultBodyBudget   = 1 << 30
	DefaultBodyPerUser  = 256 << 20
	DefaultStartTimeout = 5 * time.Minute
	DefaultIdleTimeout  = 2 * time.Minute
	DefaultTurnTimeout  = time.Minute // or half of start_timeout, if less
	DefaultMaxConns     = 4096
	DefaultConnsPerUser = 512
	maxConfigBytes      = 1 << 20
)

// rawConfig is the file as TOML decodes it; every value stays a
// Primitive so that each key's line is known when it is checked.
type rawConfig map[string]toml.Primitive

// Lookup returns the model a request names: by its name or an alias.
func (c *Config) Lookup(name string) (*Model, bool) {
	if m, ok := c.Models[name]; ok {
		return m, true
	}
	if n, ok := c.aliases[name]; ok {
		return c.Models[n], true
	}
	return nil, false
}

// Names lists the models' names, sorted.
func (c *Config) Names() []string {
	names := make([]string, 0, len(c.Models))
	for n := range c.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LoadConfig reads and checks the file at path. Every problem is reported
// at once, each with the file, the line and the key.
func LoadConfig(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("config %s: larger than %d bytes", path, maxConfigBytes)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses a config file's text; path names it in errors.
func ParseConfig(path string, data []byte) (*Config, error) {
	var raw rawConfig
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s:%d: bad TOML: %s", path, pe.Position.Line, pe.Message)
		}
		return nil, fmt.Errorf("%s: bad TOML: %w", path, err)
	}
	p := &parser{path: path, md: &md}
	c := &Config{Path: path, MaxBody: DefaultMaxBody, StartTimeout: DefaultStartTimeout,
		BodyBudget: DefaultBodyBudget, BodyPerUser: DefaultBodyPerUser, IdleTimeout: DefaultIdleTimeout, TurnTimeout: DefaultTurnTimeout, MaxConns: DefaultMaxConns, ConnsPerUser: DefaultConnsPerUser, Models: map[string]*Model{}, aliases: map[string]string{}}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := raw[k]
		switch k {
		case "api_keys":
			p.key(v, k, func(x any) error {
				keys, err := stringList(x)
				for i, key := range keys {
					if len(key) < 8 {
						return fmt.Errorf("item %d: an api key must be at least 8 characters", i+1)
					}
				}
				c.APIKeys = keys
				return err
			})
		case "max_body":
			p.key(v, k, func(x any) error {
				n, err := size(x)
				if err == nil && n == 0 {
					err = errors.New("must be at least 1M")
				}
				c.MaxBody = n
				return err
			})
		case "body_budget":
			p.key(v, k, func(x any) (err error) { c.BodyBudget, err = size(x); return err })
		case "body_budget_per_user":
			p.key(v, k, func(x any) (err error) { c.BodyPerUser, err = size(x); return err })
		case "start_timeout":
			p.key(v, k, func(x any) error { return duration(x, &c.StartTimeout, time.Second) })
		case "idle_timeout":
			p.key(v, k, func(x any) error { return duration(x, &c.IdleTimeout, time.Second) })
		case "turn_timeout":
			p.key(v, k, func(x any) error { return duration(x, &c.TurnTimeout, time.Second) })
		case "max_conns":
			p.key(v, k, func(x any) error { return count(x, &c.MaxConns, 16) })
		case "max_conns_per_user":
			p.key(v, k, func(x any) error { return count(x, &c.ConnsPerUser, 0) })
		case "model_key":
			p.key(v, k, func(x any) error {
				s, ok := x.(string)
				if !ok || len(s) < 16 {
					return fmt.Errorf("want a string of at least 16 characters, not %s", describe(x))
				}
				c.ModelKey = s
				return nil
			})
		case "unload_users":
			p.key(v, k, func(x any) (err error) { c.UnloadUsers, err = parseUsers(x); return err })
		case "upstream_users":
			p.key(v, k, func(x any) (err error) { c.UpstreamUsers, err = parseUsers(x); return err })
		case "models":
			p.models(c, v)
		default:
			p.key(v, k, func(any) error { return errUnknown })
		}
	}
	if len(c.Models) == 0 && len(p.errs) == 0 {
		p.errs = append(p.errs, fmt.Errorf("%s: no [models.NAME] table: nothing to route to", path))
	}
	p.crossCheck(c)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return c, nil
}

var errUnknown = errors.New("unknown key")

// parser collects the errors of one file.
type parser struct {
	path string
	md   *toml.MetaData
	errs []error
	// lines of the keys seen, "models.NAME.key" -> line, for cross-checks.
	lines map[string]int
}

// key decodes one value with fn, naming the file, line and key in fn's error.
func (p *parser) key(v toml.Primitive, name string, fn func(any) error) {
	line, err := tomlline.ValueAt(p.md, v, fn)
	if p.lines == nil {
		p.lines = map[string]int{}
	}
	p.lines[name] = line
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s:%d: %s: %w", p.path, line, name, err))
	}
}

func (p *parser) models(c *Config, v toml.Primitive) {
	var tables map[string]map[string]toml.Primitive
	if err := p.md.PrimitiveDecode(v, &tables); err != nil {
		p.key(v, "models", func(any) error { return errors.New("want tables [models.NAME]") })
		return
	}
	names := make([]string, 0, len(tables))
	for n := range tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		m := &Model{Name: name, Health: DefaultHealth}
		prefix := "models." + name
		firstLine := 0
		keys := make([]string, 0, len(tables[name]))
		for k := range tables[name] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p.key(tables[name][k], prefix+"."+k, func(x any) error { return m.set(k, x) })
			if l := p.lines[prefix+"."+k]; firstLine == 0 || l < firstLine {
				firstLine = l
			}
		}
		if _, m.SlotsSet = tables[name]["slots"]; !m.SlotsSet {
			m.Slots = serverSlots(m.Cmd)
		}
		p.lines[prefix] = firstLine
		where := fmt.Sprintf("%s:%d: [%s]", p.path, firstLine, prefix)
		if err := api.ValidateName(name); err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s: the model's name is its process name: %w", where, err))
		}
		if len(m.Cmd) == 0 {
			p.errs = append(p.errs, fmt.Errorf("%s: cmd is missing (the model server's argv)", where))
		}
		if m.Port == 0 {
			p.errs = append(p.errs, fmt.Errorf("%s: port is missing (the port its server listens on)", where))
		}
		c.Models[name] = m
	}
}

// crossCheck finds clashes between settings: a body budget that cannot
// hold one body, and between models: ports, aliases.
func (p *parser) crossCheck(c *Config) {
	if c.BodyPerUser < c.MaxBody || c.BodyBudget < c.BodyPerUser {
		p.errs = append(p.errs, fmt.Errorf("%s: body_budget (%d MiB) must hold body_budget_per_user (%d MiB), and that one max_body (%d MiB)",
			p.path, c.BodyBudget>>20, c.BodyPerUser>>20, c.MaxBody>>20))
	}
	if _, set := p.lines["turn_timeout"]; !set {
		c.TurnTimeout = min(DefaultTurnTimeout, c.StartTimeout/2)
	}
	if c.TurnTimeout >= c.StartTimeout {
		p.errs = append(p.errs, fmt.Errorf("%s: turn_timeout (%v) must be shorter than start_timeout (%v): a model waiting for another's turn would give up first",
			p.path, c.TurnTimeout, c.StartTimeout))
	}
	for _, name := range c.Names() {
		if c.Models[name].KeyEnv != "" && c.ModelKey == "" {
			p.errs = append(p.errs, fmt.Errorf("%s:%d: models.%s.model_key_env: there is no model_key to pass in it",
				p.path, p.lines["models."+name+".model_key_env"], name))
		}
	}
	ports := map[int]string{}
	for _, name := range c.Names() {
		m := c.Models[name]
		if other, ok := ports[m.Port]; ok && m.Port != 0 {
			p.errs = append(p.errs, fmt.Errorf("%s:%d: models.%s.port: port %d is already model %q's",
				p.path, p.lines["models."+name+".port"], name, m.Port, other))
		}
		ports[m.Port] = name
		for _, a := range m.Aliases {
			line := p.lines["models."+name+".aliases"]
			switch other, ok := c.aliases[a]; {
			case c.Models[a] != nil:
				p.errs = append(p.errs, fmt.Errorf("%s:%d: models.%s.aliases: alias %q is the name of a model", p.path, line, name, a))
			case ok:
				p.errs = append(p.errs, fmt.Errorf("%s:%d: models.%s.aliases: duplicate alias %q (also model %q's)", p.path, line, name, a, other))
			default:
				c.aliases[a] = name
			}
		}
	}
}

// set applies one key of a [models.NAME] table.
func (m *Model) set(key string, x any) error {
	switch key {
	case "cmd":
		cmd, err := stringList(x)
		if err == nil && len(cmd) == 0 {
			err = errors.New("empty argv")
		}
		m.Cmd = cmd
		return err
	case "port":
		n, ok := x.(int64)
		if !ok || n < 1 || n > 65535 {
			return fmt.Errorf("want a port number 1-65535, not %s", describe(x))
		}
		m.Port = int(n)
	case "gpus":
		items, ok := x.([]any)
		if !ok {
			return fmt.Errorf("want a list of GPU indexes or UUIDs, not %s", describe(x))
		}
		for i, it := range items {
			var ref api.GPURef
			var err error
			switch v := it.(type) {
			case int64:
				ref, err = api.ParseGPURef(strconv.FormatInt(v, 10))
			case string:
				ref, err = api.ParseGPURef(v)
			default:
				err = fmt.Errorf("want an index or a UUID, not %s", describe(it))
			}
			if err != nil {
				return fmt.Errorf("item %d: %w", i+1, err)
			}
			m.GPUs = append(m.GPUs, ref)
		}
	case "vram":
		s, ok := x.(string)
		if !ok {
			return fmt.Errorf("want a size such as \"13G\", not %s", describe(x))
		}
		n, err := api.ParseMiB(s)
		if err != nil {
			return err
		}
		m.VRAMMiB = n
	case "health":
		s, ok := x.(string)
		if !ok || !strings.HasPrefix(s, "/") {
			return fmt.Errorf("want a path starting with /, not %s", describe(x))
		}
		m.Health = s
	case "ttl":
		return duration(x, &m.TTL, time.Second)
	case "hibernate":
		// The daemon checks its policies every 250 ms (docs/disktier.md).
		return duration(x, &m.Hibernate, 250*time.Millisecond)
	case "aliases":
		a, err := stringList(x)
		for i, s := range a {
			if s == "" {
				return fmt.Errorf("item %d: empty alias", i+1)
			}
			if slices.Index(a, s) != i {
				return fmt.Errorf("duplicate alias %q", s)
			}
		}
		m.Aliases = a
		return err
	case "preload":
		b, ok := x.(bool)
		if !ok {
			return fmt.Errorf("want true or false, not %s", describe(x))
		}
		m.Preload = b
	case "slots":
		n, ok := x.(int64)
		if !ok || n < 0 || n > maxSlots {
			return fmt.Errorf("want a number of requests 0-%d (0: no bound), not %s", maxSlots, describe(x))
		}
		m.Slots = int(n)
	case "model_key_env":
		s, ok := x.(string)
		if !ok || !envName.MatchString(s) {
			return fmt.Errorf("want an environment variable's name such as \"LLAMA_API_KEY\", not %s", describe(x))
		}
		m.KeyEnv = s
	default:
		return fmt.Errorf("%w (known: aliases, cmd, gpus, health, hibernate, model_key_env, port, preload, slots, ttl, vram)", errUnknown)
	}
	return nil
}

// Argv is the model's command with ${PORT} substituted.
func (m *Model) Argv() []string {
	port := strconv.Itoa(m.Port)
	out := make([]string, len(m.Cmd))
	for i, a := range m.Cmd {
		out[i] = strings.ReplaceAll(a, "${PORT}", port)
	}
	return out
}

// envName is what an environment variable's name may be.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func stringList(x any) ([]string, error) {
	items, ok := x.([]any)
	if !ok {
		return nil, fmt.Errorf("want a list of strings, not %s", describe(x))
	}
	out := make([]string, len(items))
	for i, it := range items {
		s, ok := it.(string)
		if !ok {
			return nil, fmt.Errorf("item %d: want a string, not %s", i+1, describe(it))
		}
		out[i] = s
	}
	return out, nil
}

// count sets dst to x, a whole number of at least min.
func count(x any, dst *int, min int) error {
	n, ok := x.(int64)
	if !ok || n < int64(min) || n > 1<<20 {
		return fmt.Errorf("want a whole number %d-%d, not %s", min, 1<<20, describe(x))
	}
	*dst = int(n)
	return nil
}

func duration(x any, dst *time.Duration, min time.Duration) error {
	s, ok := x.(string)
	if !ok {
		return fmt.Errorf("want a duration such as \"5m\", not %s", describe(x))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q (want a number with a unit: \"90s\", \"5m\", \"1h\")", s)
	}
	if d < min {
		return fmt.Errorf("duration %q: must be at least %v", s, min)
	}
	*dst = d
	return nil
}

func size(x any) (int64, error) {
	s, ok := x.(string)
	if !ok {
		return 0, fmt.Errorf("want a size such as \"32M\", not %s", describe(x))
	}
	mib, err := api.ParseMiB(s)
	if err != nil {
		return 0, err
	}
	return int64(mib) << 20, nil
}

func describe(x any) string {
	switch v := x.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case bool:
		return fmt.Sprintf("%v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("%T", x)
	}
}
