// Package testutil holds helpers for tests only: root gating, building the
// project's binaries where an unprivileged test user can run them, short
// temp dirs for Unix socket paths, and a NOTIFY_SOCKET receiver. It is
// imported only from _test.go files.
package testutil
