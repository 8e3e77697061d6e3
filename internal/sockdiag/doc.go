// Package sockdiag finds which user owns a TCP socket of this host, given
// the socket's two ends, through the kernel's NETLINK_SOCK_DIAG interface
// (sock_diag(7); the wire structs are include/uapi/linux/inet_diag.h's).
// A server learns so the uid behind a connection from the same host, as
// SO_PEERCRED tells it for a Unix socket.
package sockdiag
