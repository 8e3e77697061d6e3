// Package activate owns activation: making a managed process resident on
// its GPUs by thawing it and, when it does not fit, freezing its owner's
// least recently active processes on those GPUs, rolling back on failure;
// and the holds that keep a process from being chosen to make room. It
// decides and sequences; the daemon, through Ops, checks the caller's
// rights and does every freeze and thaw.
package activate
