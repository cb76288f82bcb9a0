// Package storeclock tells the time on the store's clock, the one clock that decides when a
// timeout is due. It measures the offset between the instance's clock and the store's, NTP-style:
// the store's time is read between two local readings, so it lies within half the round trip of
// their midpoint. The latest measurement anchors the store's time to the process's monotonic
// clock, so a step of the instance's wall clock between measurements changes nothing; the error
// grows with the anchor's age by the drift a clock may have (maxDrift). The lower bound on the
// store's time (Earliest) keeps the tightest of all measurements, carried forward the same way.
package storeclock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// maxDrift is how fast two clocks may drift apart, as a fraction: 500 ppm, the fastest an NTP
// daemon slews a clock. It widens the error of a measurement as it ages.
const maxDrift = 500e-6

// Measurement is one reading of the offset between the instance's clock and the store's.
type Measurement struct {
	// Offset is the store's clock minus the instance's: positive when the instance's clock is
	// behind.
	Offset time.Duration
	// Error bounds how far Offset may be from the true offset when it was measured: half the
	// round trip.
	Error time.Duration
	// At is when it was measured, on the instance's clock.
	At time.Time
	// Measured is false until the first measurement, and always with a store that has no clock
	// of its own (persistence.Clocked is not implemented): the instance's clock is then the
	// store's.
	Measured bool

	storeAt time.Time // the store's time at the midpoint
	mono    time.Time // the midpoint on the process's monotonic clock
}

// Config configures a Clock.
type Config struct {
	// Local reads the instance's wall clock. Required.
	Local func() time.Time
	// Store is the store, which is asked its time when it implements persistence.Clocked.
	Store persistence.Store
	// Alarm is the offset above which a warning is logged (once per change). 0: never.
	Alarm time.Duration
	// OnMeasured is told of each measurement. Optional (metrics use it).
	OnMeasured func(Measurement)
}

// Clock tells the time on the store's clock. Its zero value is not usable: use New.
type Clock struct {
	cfg    Config
	store  persistence.Clocked // nil: the instance's clock is the store's
	logger watermill.LoggerAdapter

	mu       sync.Mutex
	latest   Measurement
	alarmed  bool
	reported time.Duration // the offset last warned about, while alarmed
	// floor is the latest Earliest returned, floorMono when: carried forward on the monotonic
	// clock (less the drift), it is a lower bound too, so Earliest keeps the tightest bound of all
	// measurements, and a new one with a wider error never takes it back (a timeout found due
	// would look early a moment later).
	floor, floorMono time.Time
}

// New returns a Clock for cfg.
func New(cfg Config, logger watermill.LoggerAdapter) *Clock {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	c := &Clock{cfg: cfg, logger: logger}
	c.store, _ = cfg.Store.(persistence.Clocked)
	return c
}

// Clocked reports whether the store has a clock of its own that the Clock measures.
func (c *Clock) Clocked() bool { return c.store != nil }

// Latest returns the latest measurement; zero, not Measured, before the first.
func (c *Clock) Latest() Measurement {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest
}

// Age is how long ago, on the monotonic clock, the latest measurement was made; negative
// before the first (and always without a store clock).
func (c *Clock) Age() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.latest.Measured {
		return -1
	}
	return time.Since(c.latest.mono)
}

// Measure reads the store's clock once and keeps the result as the latest measurement. With a
// store that has no clock it does nothing.
func (c *Clock) Measure(ctx context.Context) (Measurement, error) {
	if c.store == nil {
		return Measurement{}, nil
	}
	localBefore, monoBefore := c.cfg.Local(), time.Now()
	storeAt, err := c.store.Now(ctx)
	monoAfter := time.Now()
	localAfter := c.cfg.Local()
	if err != nil {
		return Measurement{}, fmt.Errorf("reading the store's clock: %w", err)
	}
	rtt := max(monoAfter.Sub(monoBefore), 0)
	half := rtt / 2
	m := Measurement{
		Offset:   storeAt.Sub(localBefore.Add(localAfter.Sub(localBefore) / 2)),
		Error:    half,
		At:       localBefore.Add(localAfter.Sub(localBefore) / 2),
		Measured: true,
		storeAt:  storeAt,
		mono:     monoBefore.Add(half),
	}
	c.mu.Lock()
	c.latest = m
	// A floor beyond what the store said, error included, means the store's clock was stepped
	// back: the floor no longer bounds it.
	if !c.floor.IsZero() && c.carried(m.mono).After(storeAt.Add(half)) {
		c.floor, c.floorMono = time.Time{}, time.Time{}
	}
	c.mu.Unlock()
	c.alarm(m)
	if c.cfg.OnMeasured != nil {
		c.cfg.OnMeasured(m)
	}
	return m, nil
}

// alarm logs a warning when the offset goes above the alarm, and again each time it moves by
// more than the alarm from the offset last warned about; and a notice when it comes back under.
func (c *Clock) alarm(m Measurement) {
	if c.cfg.Alarm <= 0 {
		return
	}
	c.mu.Lock()
	skewed := m.Offset.Abs() > c.cfg.Alarm
	warn := skewed && (!c.alarmed || (m.Offset-c.reported).Abs() > c.cfg.Alarm)
	back := !skewed && c.alarmed
	c.alarmed = skewed
	if warn {
		c.reported = m.Offset
	}
	c.mu.Unlock()
	fields := watermill.LogFields{"offset": m.Offset, "error": m.Error, "alarm": c.cfg.Alarm}
	switch {
	case warn:
		Warn(c.logger, "This instance's clock differs from the store's by more than the alarm; "+
			"due times are judged on the store's clock, so nothing is delivered early: check the instance's time synchronisation", fields)
	case back:
		c.logger.Info("This instance's clock agrees with the store's again, within the alarm", fields)
	}
}

// Alarmed reports whether the latest measurement is above the alarm.
func (c *Clock) Alarmed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.alarmed
}

// Now is the best estimate of the store's time: the latest measurement's midpoint carried
// forward on the monotonic clock, or the instance's clock without one.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	m := c.latest
	c.mu.Unlock()
	if !m.Measured {
		return c.cfg.Local()
	}
	return m.storeAt.Add(time.Since(m.mono))
}

// Earliest is a time the store's clock has certainly reached: Now less the measurement's error,
// widened by the drift since. A timeout due at or before it is due on the store's clock. Before
// the first measurement of a store's clock it is the zero time: nothing is known to be due.
func (c *Clock) Earliest() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.latest
	if !m.Measured {
		if c.store != nil {
			return time.Time{}
		}
		return c.cfg.Local()
	}
	mono := time.Now()
	age := mono.Sub(m.mono)
	earliest := m.storeAt.Add(age - m.Error - time.Duration(float64(age.Abs())*maxDrift))
	if !c.floor.IsZero() {
		if carried := c.carried(mono); carried.After(earliest) {
			earliest = carried
		}
	}
	c.floor, c.floorMono = earliest, mono
	return earliest
}

// carried is the floor carried forward to mono, less the drift. c.mu is held.
func (c *Clock) carried(mono time.Time) time.Time {
	age := mono.Sub(c.floorMono)
	return c.floor.Add(age - time.Duration(float64(age.Abs())*maxDrift))
}

// Until is how long to wait until the store's clock has certainly reached t.
func (c *Clock) Until(t time.Time) time.Duration { return t.Sub(c.Earliest()) }

// Warn logs at warn level on a logger that has one (a Warn method, as the timeoutmill command's
// has), and at info level on another: Watermill's LoggerAdapter has no warn level.
func Warn(l watermill.LoggerAdapter, msg string, fields watermill.LogFields) {
	if w, ok := l.(interface {
		Warn(msg string, fields watermill.LogFields)
	}); ok {
		w.Warn(msg, fields)
		return
	}
	l.Info(msg, fields)
}
