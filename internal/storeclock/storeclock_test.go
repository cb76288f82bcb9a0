package storeclock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
)

// inner embeds a store under a name that does not hide its Store method.
type inner = persistence.Store

// fakeStore is a store whose clock is the system clock: the one true clock of these tests. Each
// Now takes a round trip: before until the store reads its clock, after until the answer is back.
// err, when set, fails it.
type fakeStore struct {
	inner
	mu            sync.Mutex
	before, after time.Duration
	err           error
}

func (f *fakeStore) Now(context.Context) (time.Time, error) {
	f.mu.Lock()
	before, after, err := f.before, f.after, f.err
	f.mu.Unlock()
	time.Sleep(before)
	now := time.Now()
	time.Sleep(after)
	return now, err
}

func (f *fakeStore) trip(before, after time.Duration) {
	f.mu.Lock()
	f.before, f.after = before, after
	f.mu.Unlock()
}

// skewed is an instance's clock: the system clock plus an offset that may change.
type skewed struct {
	mu  sync.Mutex
	off time.Duration
}

func (s *skewed) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Add(s.off)
}

func (s *skewed) set(off time.Duration) {
	s.mu.Lock()
	s.off = off
	s.mu.Unlock()
}

// records is a logger that keeps what it was told, and can warn.
type records struct {
	watermill.LoggerAdapter
	mu    sync.Mutex
	lines []string
}

func (r *records) add(level, msg string) {
	r.mu.Lock()
	r.lines = append(r.lines, level+" "+msg)
	r.mu.Unlock()
}
func (r *records) Info(msg string, _ watermill.LogFields) { r.add("INFO", msg) }
func (r *records) Warn(msg string, _ watermill.LogFields) { r.add("WARN", msg) }
func (r *records) With(watermill.LogFields) watermill.LoggerAdapter {
	return r
}

func (r *records) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := r.lines
	r.lines = nil
	return lines
}

// The offset is the store's clock minus the instance's, within half the round trip, and the
// store's time is carried forward so that Earliest is never ahead of the store's clock and Now
// is within the error of it, whichever way the instance's clock is skewed.
func TestMeasureOffsetWithinHalfTheRoundTrip(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{3 * time.Second, -3 * time.Second, 0} {
		local := &skewed{off: skew}
		store := &fakeStore{inner: memory.New(), before: 10 * time.Millisecond, after: 10 * time.Millisecond}
		c := New(Config{Local: local.Now, Store: store}, nil)
		require.True(t, c.Clocked())
		m, err := c.Measure(t.Context())
		require.NoError(t, err)
		require.True(t, m.Measured)
		require.GreaterOrEqual(t, m.Error, 10*time.Millisecond, "half a round trip of at least 20 ms")
		require.InDelta(t, float64(-skew), float64(m.Offset), float64(m.Error+time.Millisecond), "skew %s", skew)
		require.Equal(t, m, c.Latest())
		for range 20 {
			before := time.Now()
			earliest, now := c.Earliest(), c.Now()
			after := time.Now()
			require.False(t, earliest.After(after), "skew %s: Earliest %s ahead of the store's clock", skew, earliest.Sub(after))
			require.InDelta(t, 0, float64(now.Sub(before)), float64(m.Error+after.Sub(before)+time.Millisecond), "skew %s", skew)
			time.Sleep(time.Millisecond)
		}
	}
}

// A step of the instance's clock after a measurement changes neither Now nor Earliest: they are
// carried forward on the monotonic clock. The next measurement sees the new offset.
func TestStoreTimeIgnoresStepsOfTheLocalClock(t *testing.T) {
	t.Parallel()
	local := &skewed{off: -3 * time.Second}
	c := New(Config{Local: local.Now, Store: &fakeStore{inner: memory.New()}}, nil)
	_, err := c.Measure(t.Context())
	require.NoError(t, err)
	local.set(3 * time.Second)
	earliest := c.Earliest()
	after := time.Now()
	require.False(t, earliest.After(after), "early by the step")
	require.InDelta(t, 0, float64(c.Now().Sub(after)), float64(50*time.Millisecond))

	m, err := c.Measure(t.Context())
	require.NoError(t, err)
	require.InDelta(t, float64(-3*time.Second), float64(m.Offset), float64(50*time.Millisecond))
}

// Earliest widens as the measurement ages, by the drift a clock may have.
func TestEarliestAllowsForDrift(t *testing.T) {
	t.Parallel()
	c := New(Config{Local: time.Now, Store: &fakeStore{inner: memory.New()}}, nil)
	_, err := c.Measure(t.Context())
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	gap := c.Now().Sub(c.Earliest())
	require.GreaterOrEqual(t, gap, time.Duration(float64(190*time.Millisecond)*maxDrift))
}

// A store without a clock of its own (memory, SQLite) is never measured: the instance's clock
// is the store's.
func TestStoreWithoutAClockUsesTheLocalOne(t *testing.T) {
	t.Parallel()
	local := &skewed{off: 3 * time.Second}
	c := New(Config{Local: local.Now, Store: memory.New(), Alarm: time.Second}, nil)
	require.False(t, c.Clocked())
	m, err := c.Measure(t.Context())
	require.NoError(t, err)
	require.False(t, m.Measured)
	require.False(t, c.Latest().Measured)
	require.Negative(t, c.Age())
	require.False(t, c.Alarmed())
	require.InDelta(t, float64(time.Now().Add(3*time.Second).UnixNano()), float64(c.Now().UnixNano()), float64(50*time.Millisecond))
	require.InDelta(t, float64(time.Now().Add(3*time.Second).UnixNano()), float64(c.Earliest().UnixNano()), float64(50*time.Millisecond))
}

// A failed reading keeps the latest measurement and says why.
func TestFailedMeasurementKeepsTheLatest(t *testing.T) {
	t.Parallel()
	store := &fakeStore{inner: memory.New()}
	c := New(Config{Local: time.Now, Store: store}, nil)
	first, err := c.Measure(t.Context())
	require.NoError(t, err)
	boom := errors.New("connection refused")
	store.mu.Lock()
	store.err = boom
	store.mu.Unlock()
	_, err = c.Measure(t.Context())
	require.ErrorIs(t, err, boom)
	require.Equal(t, first, c.Latest())
}

// The alarm is logged at warn level once per change: on entering it, when the offset moves by
// more than the alarm (+3 s to -3 s), and a notice on leaving it; steady offsets log nothing more.
// Each measurement reaches OnMeasured.
func TestAlarmLoggedOncePerChange(t *testing.T) {
	t.Parallel()
	local := &skewed{}
	logs := &records{LoggerAdapter: watermill.NopLogger{}}
	var seen []Measurement
	c := New(Config{Local: local.Now, Store: &fakeStore{inner: memory.New()}, Alarm: time.Second,
		OnMeasured: func(m Measurement) { seen = append(seen, m) }}, logs)
	measure := func(times int) []string {
		t.Helper()
		for range times {
			_, err := c.Measure(t.Context())
			require.NoError(t, err)
		}
		return logs.take()
	}
	require.Empty(t, measure(3), "in sync")
	require.False(t, c.Alarmed())

	local.set(3 * time.Second)
	lines := measure(3)
	require.Len(t, lines, 1)
	require.True(t, strings.HasPrefix(lines[0], "WARN This instance's clock differs from the store's"), lines[0])
	require.True(t, c.Alarmed())

	local.set(-3 * time.Second)
	lines = measure(3)
	require.Len(t, lines, 1, "a new skew is a change")
	require.True(t, strings.HasPrefix(lines[0], "WARN "), lines[0])

	local.set(-3*time.Second + 300*time.Millisecond)
	require.Empty(t, measure(2), "moved by less than the alarm")

	local.set(0)
	lines = measure(3)
	require.Len(t, lines, 1)
	require.True(t, strings.HasPrefix(lines[0], "INFO This instance's clock agrees with the store's again"), lines[0])
	require.False(t, c.Alarmed())
	require.Len(t, seen, 14)
}

// A logger without a warn level gets the warning at info level.
func TestWarnFallsBackToInfo(t *testing.T) {
	t.Parallel()
	logger := watermill.NewCaptureLogger()
	Warn(logger, "skewed", watermill.LogFields{"offset": time.Second})
	require.True(t, logger.Has(watermill.CapturedMessage{Level: watermill.InfoLogLevel, Msg: "skewed",
		Fields: watermill.LogFields{"offset": time.Second}}))
}

// Earliest never goes back, even when a new measurement has a wider error than the last: here
// the first reads the store's clock at the end of its round trip, a tight bound, and the second
// at the start of a long one.
func TestEarliestNeverGoesBack(t *testing.T) {
	t.Parallel()
	store := &fakeStore{inner: memory.New(), before: 20 * time.Millisecond}
	c := New(Config{Local: time.Now, Store: store}, nil)
	_, err := c.Measure(t.Context())
	require.NoError(t, err)
	before := c.Earliest()
	store.trip(0, 200*time.Millisecond)
	m, err := c.Measure(t.Context())
	require.NoError(t, err)
	require.GreaterOrEqual(t, m.Error, 100*time.Millisecond)
	after := c.Earliest()
	now := time.Now()
	require.False(t, after.Before(before), "went back %s", before.Sub(after))
	require.False(t, after.After(now), "ahead of the store's clock")
	require.Less(t, now.Sub(after), 50*time.Millisecond, "the first measurement's tighter bound was not kept")
}

// A store's clock stepped back (beyond what the latest measurement allows) resets the kept bound:
// Earliest follows the store's clock back rather than stay ahead of it.
func TestStoreClockSteppedBack(t *testing.T) {
	t.Parallel()
	store := &steppingStore{inner: memory.New()}
	c := New(Config{Local: time.Now, Store: store}, nil)
	_, err := c.Measure(t.Context())
	require.NoError(t, err)
	require.InDelta(t, 0, time.Since(c.Earliest()).Seconds(), 0.05)
	store.step.Store(int64(-2 * time.Second))
	_, err = c.Measure(t.Context())
	require.NoError(t, err)
	require.InDelta(t, 2, time.Since(c.Earliest()).Seconds(), 0.05, "follows the store's clock back")
}

// steppingStore's clock is the system clock plus step.
type steppingStore struct {
	inner
	step atomic.Int64
}

func (s *steppingStore) Now(context.Context) (time.Time, error) {
	return time.Now().Add(time.Duration(s.step.Load())), nil
}
