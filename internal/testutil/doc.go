// Package testutil holds helpers for tests only: root gating, building the
// project's binaries where an unprivileged test user can run them, short
// temp dirs for Unix socket paths, a NOTIFY_SOCKET receiver, and measures
// of this process (bytes read and allocated, inotify instances held). It
// is imported only from _test.go files.
package testutil
