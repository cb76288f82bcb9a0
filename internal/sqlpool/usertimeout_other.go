//go:build !linux

package sqlpool

import (
	"syscall"
	"time"
)

// userTimeoutControl does nothing where TCP_USER_TIMEOUT is not known: keepalive alone notices
// a vanished peer of an idle connection.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
