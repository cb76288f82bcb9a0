package sqlpool

import (
	"fmt"
	"net"
	"strconv"
	"time"
)

// KeepAlive is how the SQL stores' TCP connections notice a server that vanished without closing
// them (a crashed host, a failover that moved the address, a firewall that drops a connection it
// forgot): packets go unanswered, nothing is refused, and a connection nobody writes to would
// otherwise wait for ever, or a writing one for the kernel's 15 minutes of retransmissions.
//
// The settings are read from the DSN under libpq's names (see TakeKeepAlive), so that an operator
// tunes them where the server is named, for PostgreSQL and MariaDB/MySQL alike.
type KeepAlive struct {
	// Enabled turns TCP keepalive probes on. libpq's keepalives=0 turns them off. Defaults to on.
	Enabled bool
	// Idle is how long a connection stays silent before the first probe (keepalives_idle, in
	// seconds). Defaults to 5 s.
	Idle time.Duration
	// Interval is the time between unanswered probes (keepalives_interval, in seconds).
	// Defaults to 2 s.
	Interval time.Duration
	// Count is how many unanswered probes end the connection (keepalives_count). Defaults to 4.
	Count int
	// UserTimeout is how long data written may stay unacknowledged before the connection is
	// ended (TCP_USER_TIMEOUT; tcp_user_timeout, in milliseconds; 0 turns it off, leaving the
	// kernel's retransmission limit). Defaults to 15 s. On Linux only; elsewhere it is ignored.
	UserTimeout time.Duration
}

// The defaults: an idle connection whose peer vanished is ended after Idle + Count × Interval,
// 13 s, and one with data in flight after UserTimeout.
const (
	DefaultKeepAliveIdle     = 5 * time.Second
	DefaultKeepAliveInterval = 2 * time.Second
	DefaultKeepAliveCount    = 4
	DefaultUserTimeout       = 15 * time.Second
	// DefaultConnectTimeout bounds each attempt to connect to one host when the DSN sets no
	// timeout of its own, so that a host that swallows packets is an error, not a hang.
	DefaultConnectTimeout = 10 * time.Second
)

// DefaultKeepAlive returns the default settings.
func DefaultKeepAlive() KeepAlive {
	return KeepAlive{Enabled: true, Idle: DefaultKeepAliveIdle, Interval: DefaultKeepAliveInterval,
		Count: DefaultKeepAliveCount, UserTimeout: DefaultUserTimeout}
}

// The DSN settings TakeKeepAlive reads, named as libpq names them.
const (
	settingKeepalives  = "keepalives"
	settingIdle        = "keepalives_idle"
	settingInterval    = "keepalives_interval"
	settingCount       = "keepalives_count"
	settingUserTimeout = "tcp_user_timeout"
)

// TakeKeepAlive reads the keepalive settings out of params (a DSN's parameters as a driver
// parsed them) and deletes them from it, since a driver would send them to the server as session
// settings, which the server refuses. Missing settings keep their defaults: keepalives (1 or 0),
// keepalives_idle, keepalives_interval (seconds, at least 1), keepalives_count (at least 1) and
// tcp_user_timeout (milliseconds, 0 for none). A malformed one is an error naming it.
func TakeKeepAlive(params map[string]string) (KeepAlive, error) {
	k := DefaultKeepAlive()
	take := func(name string, min int, set func(int)) error {
		v, ok := params[name]
		if !ok {
			return nil
		}
		delete(params, name)
		n, err := strconv.Atoi(v)
		if err != nil || n < min {
			return fmt.Errorf("%s=%q: want a whole number of at least %d", name, v, min)
		}
		set(n)
		return nil
	}
	for _, err := range []error{
		take(settingKeepalives, 0, func(n int) { k.Enabled = n != 0 }),
		take(settingIdle, 1, func(n int) { k.Idle = time.Duration(n) * time.Second }),
		take(settingInterval, 1, func(n int) { k.Interval = time.Duration(n) * time.Second }),
		take(settingCount, 1, func(n int) { k.Count = n }),
		take(settingUserTimeout, 0, func(n int) { k.UserTimeout = time.Duration(n) * time.Millisecond }),
	} {
		if err != nil {
			return KeepAlive{}, err
		}
	}
	return k, nil
}

// Dialer returns a dialer with k's settings whose every connection attempt ends after
// connectTimeout (none when 0).
func (k KeepAlive) Dialer(connectTimeout time.Duration) *net.Dialer {
	d := &net.Dialer{Timeout: connectTimeout}
	if !k.Enabled {
		d.KeepAlive = -1
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: false}
	} else {
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: k.Idle, Interval: k.Interval, Count: k.Count}
	}
	if k.UserTimeout > 0 {
		d.Control = userTimeoutControl(k.UserTimeout)
	}
	return d
}
