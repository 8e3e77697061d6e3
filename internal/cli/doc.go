// Package cli implements gpuschedctl, the command-line client of the
// gpusched daemon: its commands, flags and output (tables for people, one
// JSON object per line with --json). It talks to the daemon only through
// pkg/api and never imports another internal package.
package cli
