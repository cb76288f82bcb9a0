package wireparse_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
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
		"":                      "is empty",
		"  ":                    "is empty",
		"tomorrow":              "is not an RFC 3339 time",
		"2030-01-02 03:04:05":   "is not an RFC 3339 time",
		"2030-01-02T03:04:05":   "is not an RFC 3339 time", // no offset: ambiguous
		"10000-01-01T00:00:00Z": "is not an RFC 3339 time",
		"2030-13-02T03:04:05Z":  "is not an RFC 3339 time",
	} {
		_, err := wireparse.ParseExpire(in)
		require.ErrorIs(t, err, wire.ErrInvalidHeader, in)
		require.ErrorContains(t, err, why, in)
	}
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
