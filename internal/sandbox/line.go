package sandbox

import (
	"bufio"
	"errors"
	"fmt"
)

// errLineTooLong is a handshake line past its bound.
var errLineTooLong = errors.New("handshake line too long")

// readLine reads one newline-terminated line of at most max bytes (newline
// excluded) and returns it without the newline; a longer line is an error,
// never buffered whole.
func readLine(r *bufio.Reader, max int) (string, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 {
			return "", fmt.Errorf("%w (over %d bytes)", errLineTooLong, max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return string(line[:len(line)-1]), nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return "", err
		}
	}
}
