// Package config holds the daemon's configuration: one struct with
// defaults, command-line flags bound to it, and validation at load.
package config
