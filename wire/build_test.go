package wire_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/wire"
)

func TestFormatExpire(t *testing.T) {
	t.Parallel()
	plus2 := time.FixedZone("+02", 2*3600)
	cases := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), "2030-01-02T03:04:05Z"},
		{time.Date(2030, 1, 2, 3, 4, 5, 120_000_000, time.UTC), "2030-01-02T03:04:05.12Z"},
		{time.Date(2030, 1, 2, 3, 4, 5, 1, time.UTC), "2030-01-02T03:04:05.000000001Z"},
		{time.Date(2030, 1, 2, 1, 0, 0, 0, plus2), "2030-01-01T23:00:00Z"},
		{time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC), "9999-12-31T23:59:59.999999Z"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, wire.FormatExpire(c.in), "%s", c.in)
	}
}

// What FormatExpire writes, the manager reads back as the same time, rounded up to Precision:
// never earlier.
func TestFormatExpireReadsBackNeverEarlier(t *testing.T) {
	t.Parallel()
	base := time.Date(2031, 6, 30, 12, 0, 0, 0, time.FixedZone("-07", -7*3600))
	for _, ns := range []int{0, 1, 999, 1000, 1001, 500_000_000, 999_999_999} {
		due := base.Add(time.Duration(ns))
		got, err := wireparse.ParseExpire(wire.FormatExpire(due))
		require.NoError(t, err)
		require.False(t, got.Before(due), "%s read back as %s", due, got)
		require.Less(t, got.Sub(due), wire.Precision)
		require.Equal(t, time.UTC, got.Location())

		delayed, ok, err := wireparse.Due(map[string]string{wire.HeaderExpire: wire.FormatExpire(due)}, time.Now())
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, delayed.Equal(got))
	}
}

func TestIsRoutingHeader(t *testing.T) {
	t.Parallel()
	for _, k := range []string{
		wire.HeaderExpire, wire.HeaderDestination, wire.HeaderOwner, wire.HeaderKey, wire.HeaderKeyPolicy,
		wire.HeaderWatermillDelayedUntil, wire.HeaderWatermillDelayedFor, wire.HeaderDue,
	} {
		require.True(t, wire.IsRoutingHeader(k), k)
		require.Equal(t, wire.IsRoutingHeader(k), wireparse.IsRoutingHeader(k), k)
	}
	for _, k := range []string{
		"", "Timeout.Expire", "timeout.expire ", "timeout.", "correlation_id", "traceparent",
		dispatcherqueue.HeaderDispatchIDs, dispatcherqueue.HeaderDispatchAt,
		wire.HeaderFailureReason, wire.HeaderFailureQueue, wire.HeaderFailureHandler, wire.HeaderFailureTime,
		wire.HeaderFailureAttempts, wire.HeaderFailureDelayedRetries,
		wire.HeaderRetryIgnoreUntil, wire.HeaderRetryAttempts, wire.HeaderRetryDelayedRetries, "retry.deferred_pass",
	} {
		require.False(t, wire.IsRoutingHeader(k), k)
		require.Equal(t, wire.IsRoutingHeader(k), wireparse.IsRoutingHeader(k), k)
	}
}
