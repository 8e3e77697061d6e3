package checkpoint

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// peerUID is the owner of the socket at the other end of a loopback TCP
// connection: the entry of /proc/net/tcp (or tcp6, for a v4-mapped
// client) whose local address is conn's remote one and the other way
// round.
func peerUID(conn *net.TCPConn) (uint32, error) {
	local, remote := conn.LocalAddr().(*net.TCPAddr), conn.RemoteAddr().(*net.TCPAddr)
	for _, table := range []struct {
		path   string
		mapped bool
	}{{"/proc/net/tcp", false}, {"/proc/net/tcp6", true}} {
		uid, ok, err := findSocketUID(table.path, procNetAddr(remote, table.mapped), procNetAddr(local, table.mapped))
		if err != nil || ok {
			return uid, err
		}
	}
	return 0, fmt.Errorf("no socket %s -> %s in /proc/net/tcp", remote, local)
}

// procNetAddr writes an IPv4 address as /proc/net/tcp* does: the address
// words in host byte order, then the port.
func procNetAddr(a *net.TCPAddr, mapped bool) string {
	ip := a.IP.To4()
	if ip == nil {
		return ""
	}
	word := func(b []byte) string { return fmt.Sprintf("%08X", binary.NativeEndian.Uint32(b)) }
	s := word(ip)
	if mapped {
		s = "0000000000000000" + word([]byte{0, 0, 0xff, 0xff}) + s
	}
	return fmt.Sprintf("%s:%04X", s, a.Port)
}

func findSocketUID(path, local, remote string) (uid uint32, found bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[1] != local || fields[2] != remote {
			continue
		}
		n, err := strconv.ParseUint(fields[7], 10, 32)
		return uint32(n), err == nil, err
	}
	return 0, false, sc.Err()
}
