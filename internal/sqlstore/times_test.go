package sqlstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRoundUpMicro: a time between two microseconds moves to the later one, so that a timeout is
// never claimed before its due time; a whole microsecond stays; the result is in UTC.
func TestRoundUpMicro(t *testing.T) {
	t.Parallel()
	zone := time.FixedZone("x", -5*3600)
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, zone)
	require.Equal(t, at.UTC(), RoundUpMicro(at))
	require.Equal(t, time.UTC, RoundUpMicro(at).Location())
	require.Equal(t, at.Add(time.Microsecond).UTC(), RoundUpMicro(at.Add(1)))
	require.Equal(t, at.Add(time.Microsecond).UTC(), RoundUpMicro(at.Add(999)))
}

// TestTimesTravelBothWays: each format sends a time as its database keeps it and reads it back
// the same instant, in UTC.
func TestTimesTravelBothWays(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	for format, sent := range map[TimeFormat]any{
		TimeValue:     at.UTC(),
		TimeText:      "2030-01-02 02:04:05.000006",
		TimeUnixMicro: at.UnixMicro(),
	} {
		b := &Binding{Times: format}
		require.Equal(t, sent, b.time(at), format)
		back, err := b.ReadTime(sent)
		require.NoError(t, err, format)
		require.True(t, back.Equal(at), format)
		require.Equal(t, time.UTC, back.Location(), format)
	}
}

// TestTimeTextReads: MariaDB's DATETIME comes back as text or bytes (parseTime off), or as a
// time.Time whose wall clock the driver put in the DSN's loc: the wall clock is UTC whatever the
// loc.
func TestTimeTextReads(t *testing.T) {
	t.Parallel()
	b := &Binding{Times: TimeText}
	want := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	for _, src := range []any{
		"2030-01-02 03:04:05.000006",
		[]byte("2030-01-02 03:04:05.000006"),
		time.Date(2030, 1, 2, 3, 4, 5, 6000, time.FixedZone("loc", 7200)),
	} {
		got, err := b.ReadTime(src)
		require.NoError(t, err, "%T", src)
		require.Equal(t, want, got, "%T", src)
	}
	_, err := b.ReadTime("yesterday")
	require.ErrorContains(t, err, "DATETIME")
}

// TestReadTimeRefusesOtherTypes: a value of a type the format does not send is an error, not a
// zero time.
func TestReadTimeRefusesOtherTypes(t *testing.T) {
	t.Parallel()
	for format, src := range map[TimeFormat]any{TimeValue: int64(1), TimeText: int64(1), TimeUnixMicro: time.Now()} {
		_, err := (&Binding{Times: format}).ReadTime(src)
		require.ErrorContains(t, err, "cannot read", format)
	}
}

// TestLastTime: a time past the binding's last is sent as the last (a lease that runs past SQL
// Server's year 9999); earlier times are sent as they are.
func TestLastTime(t *testing.T) {
	t.Parallel()
	last := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	b := &Binding{Times: TimeValue, LastTime: last}
	require.Equal(t, last, b.time(last.Add(time.Hour)))
	early := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, early, b.time(early))
}

// TestBinaryText: MariaDB's binary strings are sent as bytes, others as strings.
func TestBinaryText(t *testing.T) {
	t.Parallel()
	require.Equal(t, []byte("a"), (&Binding{BinaryText: true}).text("a"))
	require.Equal(t, "a", (&Binding{}).text("a"))
}
