package timeouts

import (
	"time"
)

// Clock reads the wall clock. The system clock is the default of Config.Clock; another is for
// tests and simulations (see Config.Clock).
type Clock interface {
	Now() time.Time
}

// systemClock is the default Clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// DefaultClockSkewAlarm is the default of Config.ClockSkewAlarm.
const DefaultClockSkewAlarm = time.Second

// ClockOffset is the latest measurement of the offset between a manager's clock (Config.Clock)
// and its store's (persistence.Clocked), made at least once per poll.
type ClockOffset struct {
	// Offset is the store's clock minus the manager's: positive when the manager's clock is
	// behind the store's, negative when it is ahead.
	Offset time.Duration
	// Error bounds how far Offset may be from the true offset: half the round trip of the
	// measurement.
	Error time.Duration
	// At is when it was measured, on the manager's clock.
	At time.Time
	// Measured is false before the first measurement, and always with a store that has no clock
	// of its own (memory, SQLite): the manager's clock is then the store's, and Offset is 0.
	Measured bool
	// Alarm is true while |Offset| is above Config.ClockSkewAlarm.
	Alarm bool
}

// ClockOffset returns the latest measurement of the offset between the manager's clock and its
// store's. It reads memory and never the store.
func (m *Manager) ClockOffset() ClockOffset {
	l := m.clock.Latest()
	return ClockOffset{Offset: l.Offset, Error: l.Error, At: l.At, Measured: l.Measured, Alarm: m.clock.Alarmed()}
}
