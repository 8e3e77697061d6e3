// Package config holds the daemon's configuration: one struct with
// defaults, command-line flags bound to it, an optional TOML file whose
// keys are those flags (file.go), and validation at load.
package config
