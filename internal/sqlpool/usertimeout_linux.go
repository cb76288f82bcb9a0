package sqlpool

import (
	"syscall"
	"time"
)

// tcpUserTimeout is Linux's TCP_USER_TIMEOUT socket option (linux/tcp.h), which package syscall
// does not name.
const tcpUserTimeout = 18

// userTimeoutControl sets TCP_USER_TIMEOUT on a TCP socket before it connects: the kernel ends
// the connection when data it sent stays unacknowledged that long, and counts keepalive probes
// against the same limit.
func userTimeoutControl(timeout time.Duration) func(network, address string, c syscall.RawConn) error {
	ms := int(timeout.Milliseconds())
	return func(network, _ string, c syscall.RawConn) error {
		switch network {
		case "tcp", "tcp4", "tcp6":
		default:
			return nil // a Unix socket has no such option
		}
		var opErr error
		err := c.Control(func(fd uintptr) {
			opErr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, ms)
		})
		if err != nil {
			return err
		}
		return opErr
	}
}
