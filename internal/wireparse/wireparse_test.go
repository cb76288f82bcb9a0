package wireparse_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

func TestParseExpire(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Time{
		"2030-01-02T03:04:05Z":                time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		"2030-01-02T03:04:05.25Z":             time.Date(2030, 1, 2, 3, 4, 5, 250_000_000, time.UTC),
		"2030-01-02T05:04:05.123456+02:00":    time.Date(2030, 1, 2, 3, 4, 5, 123_456_000, time.UTC),
		"2030-01-02T03:04:05.1234561Z":        time.Date(2030, 1, 2, 3, 4, 5, 123_457_000, time.UTC), // rounded up, never early
		"2030-01-01T22:04:05.000000001-05:00": time.Date(2030, 1, 2, 3, 4, 5, 1000, time.UTC),
	} {
		got, err := wireparse.ParseExpire(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		require.Equal(t, time.UTC, got.Location())
	}
	for in, why := range map[string]string{
		"":                     "is empty",
		"  ":                   "is empty",
		"tomorrow":             "is not an RFC 3339 time",
		"2030-01-02 03:04:05":  "is not an RFC 3339 time",
		"2030-01-02T03:04:05":  "is not an RFC 3339 time", // no offset: ambiguous
		"2030-13-02T03:04:05Z": "is not an RFC 3339 time",
	} {
		_, err := wireparse.ParseExpire(in)
		require.ErrorIs(t, err, wire.ErrInvalidHeader, in)
		require.ErrorContains(t, err, why, in)
	}
}

// TestDueTimesBeyondTheYear9999AreOutOfRange: whichever way a due time passes the end of 9999
// (more digits, an offset, rounding up, Watermill's end of the second), it is refused as out of
// range, in those words, and never stored as a time a store would refuse or misread.
func TestDueTimesBeyondTheYear9999AreOutOfRange(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, v := range []string{
		"10000-01-01T00:00:00Z",
		"+10000-01-01T00:00:00Z",
		"123456-06-01T00:00:00.5+02:00",
		"9999-12-31T23:00:00-05:00",    // 10000-01-01T04:00:00Z
		"9999-12-31T23:59:59.9999999Z", // rounded up to the microsecond: 10000-01-01
		"9999-12-31T23:59:59.999999001Z",
	} {
		_, err := wireparse.ParseExpire(v)
		require.ErrorIs(t, err, wire.ErrInvalidHeader, v)
		require.ErrorIs(t, err, wireparse.ErrOutOfRange, v)
		require.ErrorContains(t, err, wire.HeaderExpire+" "+strconv.Quote(v)+" is out of range", v)

		_, delayed, err := wireparse.Due(map[string]string{wire.HeaderExpire: v}, now)
		require.ErrorIs(t, err, wireparse.ErrOutOfRange, v)
		require.False(t, delayed)

		_, err = wireparse.ParseTime(v)
		require.ErrorIs(t, err, wireparse.ErrOutOfRange, v)
		require.ErrorContains(t, err, "out of range", v)
	}
	lateNow := time.Date(9999, 12, 31, 23, 59, 59, 500_000_000, time.UTC)
	for _, tc := range []struct {
		why string
		md  map[string]string
		now time.Time
	}{
		{"more digits", map[string]string{wire.HeaderWatermillDelayedUntil: "10000-01-01T00:00:00Z"}, now},
		{"the end of its second", map[string]string{wire.HeaderWatermillDelayedUntil: "9999-12-31T23:59:59Z"}, now},
		{"now + delayed_for, capped at the end of its second", map[string]string{
			wire.HeaderWatermillDelayedUntil: "9999-12-31T23:59:59Z", wire.HeaderWatermillDelayedFor: "1h"}, lateNow},
		{"rounded up", map[string]string{wire.HeaderWatermillDelayedUntil: "9999-12-31T23:59:59.9999999Z"}, now},
	} {
		_, delayed, err := wireparse.Due(tc.md, tc.now)
		require.ErrorIs(t, err, wire.ErrInvalidHeader, tc.why)
		require.ErrorIs(t, err, wireparse.ErrOutOfRange, tc.why)
		require.ErrorContains(t, err, wire.HeaderWatermillDelayedUntil+" ", tc.why)
		require.ErrorContains(t, err, "is out of range", tc.why)
		require.False(t, delayed)
	}

	due, delayed, err := wireparse.Due(map[string]string{
		wire.HeaderWatermillDelayedUntil: "9999-12-31T23:59:58Z", wire.HeaderWatermillDelayedFor: "1h"}, lateNow)
	require.NoError(t, err, "the end of the second before the last is in range")
	require.True(t, delayed)
	require.Equal(t, time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), due)

	last := "9999-12-31T23:59:59.999999Z"
	got, err := wireparse.ParseExpire(last)
	require.NoError(t, err, "the last microsecond of 9999 is in range")
	require.Equal(t, persistence.MaxDue, got)
	got, err = wireparse.ParseTime("9999-12-31T18:59:59.999999-05:00")
	require.NoError(t, err)
	require.Equal(t, persistence.MaxDue, got)
	_, err = wireparse.CheckRange("x", persistence.MaxDue.Add(time.Microsecond))
	require.ErrorIs(t, err, wireparse.ErrOutOfRange)
	_, err = wireparse.CheckRange("x", persistence.MaxDue)
	require.NoError(t, err)
}

func TestDue(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 700_000_000, time.UTC)

	_, delayed, err := wireparse.Due(map[string]string{"other": "x"}, now)
	require.NoError(t, err)
	require.False(t, delayed)

	due, delayed, err := wireparse.Due(map[string]string{wire.HeaderExpire: "2030-01-02T03:04:09.5Z", wire.HeaderWatermillDelayedUntil: "2031-01-01T00:00:00Z"}, now)
	require.NoError(t, err)
	require.True(t, delayed)
	require.Equal(t, time.Date(2030, 1, 2, 3, 4, 9, 500_000_000, time.UTC), due, "timeout.expire wins")

	// Watermill's delay.For(1.5s) at now writes until = floor(now+1.5s) = 03:04:07 and for = 1.5s.
	md := map[string]string{wire.HeaderWatermillDelayedUntil: "2030-01-02T03:04:07Z", wire.HeaderWatermillDelayedFor: "1.5s"}
	due, _, err = wireparse.Due(md, now)
	require.NoError(t, err)
	require.Equal(t, now.Add(1500*time.Millisecond), due, "now + delayed_for recovers the fraction")

	// Received much later (say at the satellite), the end of the truncated second caps it.
	due, _, err = wireparse.Due(md, now.Add(10*time.Second))
	require.NoError(t, err)
	require.Equal(t, time.Date(2030, 1, 2, 3, 4, 8, 0, time.UTC), due)

	// Without delayed_for, the end of the second: never early.
	due, _, err = wireparse.Due(map[string]string{wire.HeaderWatermillDelayedUntil: "2030-01-02T03:04:07Z"}, now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2030, 1, 2, 3, 4, 8, 0, time.UTC), due)

	// With a fraction (not written by Watermill itself), taken as it stands.
	due, _, err = wireparse.Due(map[string]string{wire.HeaderWatermillDelayedUntil: "2030-01-02T03:04:07.25Z"}, now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2030, 1, 2, 3, 4, 7, 250_000_000, time.UTC), due)

	_, _, err = wireparse.Due(map[string]string{wire.HeaderWatermillDelayedUntil: "soon"}, now)
	require.ErrorIs(t, err, wire.ErrInvalidHeader)
	_, _, err = wireparse.Due(map[string]string{wire.HeaderExpire: ""}, now)
	require.ErrorIs(t, err, wire.ErrInvalidHeader)
}

func TestDestination(t *testing.T) {
	t.Parallel()
	d, err := wireparse.Destination(map[string]string{wire.HeaderDestination: "billing.payments-ünï"})
	require.NoError(t, err)
	require.Equal(t, "billing.payments-ünï", d)

	long := make([]byte, wire.MaxDestinationLength+1)
	for i := range long {
		long[i] = 'a'
	}
	for v, why := range map[string]string{"": "is empty", " ": "is empty", "a\nb": "control character", "\xff": "not valid UTF-8", string(long): "longer than"} {
		_, err := wireparse.Destination(map[string]string{wire.HeaderDestination: v})
		require.ErrorIs(t, err, wire.ErrInvalidHeader, v)
		require.ErrorContains(t, err, why)
	}
	_, err = wireparse.Destination(map[string]string{})
	require.ErrorContains(t, err, "is missing")
}

func TestQueueNamesAndValidateName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "orders.Timeouts", wire.TimeoutsQueue("orders"))
	require.Equal(t, "orders.TimeoutsDispatcher", wire.DispatcherQueue("orders"))
	require.Equal(t, "orders.Deferred.host-1", wire.DeferredQueue("orders", "host-1"))
	require.NoError(t, wireparse.ValidateName("endpoint", "orders.eu-1_ü"))
	for _, bad := range []string{"", "has space", "tab\t", ".lead", "trail.", string(make([]byte, 201))} {
		require.ErrorIs(t, wireparse.ValidateName("endpoint", bad), wire.ErrInvalidName, bad)
	}
}

// FuzzParseExpire: no input panics, and every accepted time formats and parses back to itself.
func FuzzParseExpire(f *testing.F) {
	for _, seed := range []string{"2030-01-02T03:04:05Z", "2030-01-02T03:04:05.123456789+14:00", "0001-01-01T00:00:00Z",
		"9999-12-31T23:59:59.999999999-23:59", "", "garbage", "2030-02-30T00:00:00Z", "2030-01-02T03:04:05.Z"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := wireparse.ParseExpire(s)
		if err != nil {
			require.ErrorIs(t, err, wire.ErrInvalidHeader)
			return
		}
		again, err := wireparse.ParseExpire(wireparse.FormatExpire(got))
		if got.Year() > 9999 { // rounding up 9999-12-31T23:59:59.9999999Z crosses into year 10000
			return
		}
		require.NoError(t, err)
		require.True(t, got.Equal(again), "%q: %s != %s", s, got, again)
		require.Equal(t, got, got.Truncate(wire.Precision), "kept to the microsecond")
	})
}
