package wireparse_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// FuzzDue: whatever delay headers a producer sends, Due does not panic, refuses with
// ErrInvalidHeader or accepts; an accepted due time is in UTC, kept to the microsecond, never
// before the time the header names, and (within RFC 3339's years) formats and parses back to
// itself, so a stored timeout reads the same on every backend and after a redelivery.
func FuzzDue(f *testing.F) {
	f.Add(true, "2030-01-02T03:04:05.25+01:00", false, "", "", int64(0))
	f.Add(false, "", true, "2030-01-02T03:04:05Z", "1.5s", int64(1893553445000000000))
	f.Add(false, "", true, "2030-01-02T03:04:05.123Z", "", int64(0))
	f.Add(true, "", true, "2030-01-02T03:04:05Z", "-1h", int64(-1))
	f.Add(true, "9999-12-31T23:59:59.9999999Z", false, "", "", int64(0))
	f.Add(false, "", true, "9999-12-31T23:59:59Z", "9999h", int64(1<<62))
	f.Add(true, "0000-01-01T00:00:00-23:59", false, "", "", int64(0))
	f.Fuzz(func(t *testing.T, hasExpire bool, expire string, hasUntil bool, until, delayedFor string, nowNanos int64) {
		md := map[string]string{}
		if hasExpire {
			md[wire.HeaderExpire] = expire
		}
		if hasUntil {
			md[wire.HeaderWatermillDelayedUntil] = until
			md[wire.HeaderWatermillDelayedFor] = delayedFor
		}
		due, delayed, err := wireparse.Due(md, time.Unix(0, nowNanos))
		if err != nil {
			require.ErrorIs(t, err, wire.ErrInvalidHeader)
			require.False(t, delayed)
			return
		}
		if !delayed {
			require.False(t, hasExpire || hasUntil, "a delay header that parses is a delay")
			return
		}
		require.Equal(t, time.UTC, due.Location())
		require.True(t, due.Equal(due.Truncate(wire.Precision)), "kept to the microsecond: %s", due)
		named := until
		if hasExpire {
			named = expire
		}
		asked, err := time.Parse(time.RFC3339Nano, named)
		require.NoError(t, err, "an accepted header is RFC 3339")
		require.False(t, due.Before(asked), "never before the time asked for: %s < %s", due, asked)
		if hasExpire {
			require.Less(t, due.Sub(asked), wire.Precision, "timeout.expire is taken as it stands, rounded up to the microsecond")
		}
		require.False(t, due.After(persistence.MaxDue), "accepted beyond the year 9999: %s", due)
		again, err := wireparse.ParseExpire(wireparse.FormatExpire(due))
		require.NoError(t, err)
		require.True(t, due.Equal(again), "%s formats and parses back to %s", due, again)
	})
}

// FuzzDestination: an accepted destination is exactly the header, non-blank, valid UTF-8 without
// control characters and short enough for every store; anything else is ErrInvalidHeader.
func FuzzDestination(f *testing.F) {
	for _, s := range []string{"orders", "", " ", "a\x00b", "\xff", "billing.payments-ünï", strings.Repeat("d", 251), "q'; DROP TABLE x; --"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := wireparse.Destination(map[string]string{wire.HeaderDestination: s})
		if err != nil {
			require.ErrorIs(t, err, wire.ErrInvalidHeader)
			return
		}
		require.Equal(t, s, got)
		require.NotEmpty(t, strings.TrimSpace(got))
		require.LessOrEqual(t, len(got), wire.MaxDestinationLength)
		require.True(t, utf8.ValidString(got))
		for _, r := range got {
			require.False(t, r < 0x20 || r == 0x7f, "control character %U", r)
		}
	})
}
