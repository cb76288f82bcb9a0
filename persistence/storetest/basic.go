package storetest

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

func (s suite) testEmptyStore(t *testing.T) {
	store, ctx := s.setup(t)

	_, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.False(t, ok, "Next on an empty store")

	ids, err := store.ClaimDue(ctx, base().Add(24*time.Hour), 100, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids)

	_, err = store.Peek(ctx, "nothing")
	require.ErrorIs(t, err, persistence.ErrNotFound)
}

func (s suite) testRoundTrip(t *testing.T) {
	store, ctx := s.setup(t)
	due := base().Add(time.Hour)

	big := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.UintN(256))
	}

	cases := []persistence.Timeout{
		{
			ID: "ascii", Destination: "orders", Due: due, Owner: "order-1",
			Payload:  []byte(`{"order":1}`),
			Metadata: map[string]string{"_watermill_message_uuid": "ascii", "name": "value"},
		},
		{
			ID: "non-ascii-ünïcødé-日本-🚀", Destination: "bestellungen-größe", Due: due, Owner: "commande-éé",
			Payload:  []byte("Grüße, 世界 🚀"),
			Metadata: map[string]string{"clé": "valeur ✓", "日本": "語"},
		},
		{
			ID: "empty-values", Destination: "orders", Due: due,
			Payload:  []byte("x"),
			Metadata: map[string]string{"empty": "", "also-empty": ""},
		},
		{
			ID: "invalid-utf8", Destination: "orders", Due: due,
			Payload:  []byte{0xff, 0xfe, 0x00, 0xc3, 0x28, 0x00},
			Metadata: map[string]string{"bad\xff": "\xc3\x28\x00", "nul": "a\x00b"},
		},
		{ID: "empty-payload", Destination: "orders", Due: due, Payload: []byte{}},
		{ID: "nil-payload-nil-metadata", Destination: "orders", Due: due},
		{
			ID: "one-mebibyte", Destination: "orders", Due: due,
			Payload:  big,
			Metadata: map[string]string{"size": "1048576"},
		},
		{ID: strings.Repeat("i", persistence.MaxIDLength), Destination: "orders", Due: due},
	}
	for _, want := range cases {
		mustStore(ctx, t, store, want)
		got, err := store.Peek(ctx, want.ID)
		require.NoError(t, err, "Peek %q", want.ID)
		requireSameTimeout(t, want, got)
		require.Zero(t, got.FailureCount, "FailureCount of a new timeout")
	}
}

func (s suite) testDuePrecisionAndUTC(t *testing.T) {
	store, ctx := s.setup(t)
	zone := time.FixedZone("UTC+05:30", 5*3600+30*60)
	dues := map[string]time.Time{
		"micro":       time.Date(2031, 4, 5, 6, 7, 8, 123456000, time.UTC),
		"one-micro":   time.Date(2031, 4, 5, 6, 7, 8, 1000, time.UTC),
		"other-zone":  time.Date(2031, 4, 5, 11, 37, 8, 999999000, zone),
		"local-clock": base().Add(90 * time.Minute).Local(),
		"past":        time.Date(2001, 9, 9, 1, 46, 40, 5000, time.UTC),
		"after-2038":  time.Date(2100, 1, 1, 0, 0, 0, 1000, time.UTC),
	}
	for id, due := range dues {
		mustStore(ctx, t, store, timeout(id, due))
	}
	for id, due := range dues {
		got, err := store.Peek(ctx, id)
		require.NoError(t, err, "Peek %q", id)
		require.True(t, due.Equal(got.Due), "%s: Due want %s, got %s", id, due.UTC(), got.Due)
		require.Equal(t, time.UTC, got.Due.Location(), "%s: Due must come back in UTC", id)
	}
}

func (s suite) testMissingID(t *testing.T) {
	store, ctx := s.setup(t)
	mustStore(ctx, t, store, timeout("present", base()))

	_, err := store.Peek(ctx, "missing")
	require.ErrorIs(t, err, persistence.ErrNotFound)

	removed, err := store.Remove(ctx, "missing")
	require.NoError(t, err)
	require.False(t, removed, "Remove of a missing id")

	incremented, err := store.IncrementFailureCount(ctx, "missing")
	require.NoError(t, err)
	require.False(t, incremented, "IncrementFailureCount of a missing id")

	cancelled, err := store.Cancel(ctx, "missing")
	require.NoError(t, err)
	require.False(t, cancelled, "Cancel of a missing id")

	n, err := store.CancelByOwner(ctx, "nobody")
	require.NoError(t, err)
	require.Zero(t, n, "CancelByOwner of an owner with no timeouts")

	_, err = store.Peek(ctx, "present")
	require.NoError(t, err, "operations on a missing id must leave others alone")
}

func (s suite) testIncrementFailureCount(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	mustStore(ctx, t, store, timeout("a", now), timeout("b", now))

	for want := 1; want <= 3; want++ {
		ok, err := store.IncrementFailureCount(ctx, "a")
		require.NoError(t, err)
		require.True(t, ok)
		got, err := store.Peek(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, want, got.FailureCount)
	}

	other, err := store.Peek(ctx, "b")
	require.NoError(t, err)
	require.Zero(t, other.FailureCount, "another timeout's count must not change")

	// Counting works while the timeout is claimed, which is when the dispatcher counts.
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b"}, ids)
	ok, err := store.IncrementFailureCount(ctx, "b")
	require.NoError(t, err)
	require.True(t, ok)
	other, err = store.Peek(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, 1, other.FailureCount)
}

func (s suite) testIdempotentStore(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	first := persistence.Timeout{
		ID: "same", Destination: "orders", Due: now, Owner: "owner-1",
		Payload: []byte("first"), Metadata: map[string]string{"v": "1"},
	}
	mustStore(ctx, t, store, first)

	second := persistence.Timeout{
		ID: "same", Destination: "invoices", Due: now.Add(-time.Hour), Owner: "owner-2",
		Payload: []byte("second"), Metadata: map[string]string{"v": "2"},
	}
	inserted, err := store.Store(ctx, second)
	require.NoError(t, err)
	require.False(t, inserted, "second Store of the same id")

	got, err := store.Peek(ctx, "same")
	require.NoError(t, err)
	requireSameTimeout(t, first, got)

	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"same"}, ids, "one id, one timeout")

	// Storing it again while it is claimed changes nothing either: the lease still holds.
	inserted, err = store.Store(ctx, first)
	require.NoError(t, err)
	require.False(t, inserted)
	ids, err = store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ids, "a redelivered Store must not release a claim")
}

func (s suite) testStoreAgainAfterRemove(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	mustStore(ctx, t, store, timeout("again", now))
	removed, err := store.Remove(ctx, "again")
	require.NoError(t, err)
	require.True(t, removed)

	mustStore(ctx, t, store, timeout("again", now.Add(time.Minute)))
	got, err := store.Peek(ctx, "again")
	require.NoError(t, err)
	require.True(t, now.Add(time.Minute).Equal(got.Due))
}

func (s suite) testInvalidTimeout(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	cases := map[string]persistence.Timeout{
		"empty id":          {Destination: "orders", Due: now},
		"id too long":       {ID: strings.Repeat("i", persistence.MaxIDLength+1), Destination: "orders", Due: now},
		"empty destination": {ID: "no-destination", Due: now},
		"zero due":          {ID: "no-due", Destination: "orders"},
	}
	for name, to := range cases {
		inserted, err := store.Store(ctx, to)
		require.ErrorIs(t, err, persistence.ErrInvalidTimeout, name)
		require.False(t, inserted, name)
	}
	_, ok, err := store.Next(ctx)
	require.NoError(t, err)
	require.False(t, ok, "an invalid timeout must not be stored")
}

func (s suite) testRemove(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	mustStore(ctx, t, store, timeout("a", now), timeout("b", now.Add(time.Second)))

	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)

	removed, err := store.Remove(ctx, "a")
	require.NoError(t, err)
	require.True(t, removed, "Remove of a claimed timeout")
	removed, err = store.Remove(ctx, "a")
	require.NoError(t, err)
	require.False(t, removed, "second Remove: a possible duplicate dispatch")

	_, err = store.Peek(ctx, "a")
	require.ErrorIs(t, err, persistence.ErrNotFound)
	ids, err = store.ClaimDue(ctx, now.Add(time.Hour), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, ids, "a removed timeout is never claimed again")
}

func (s suite) testCancel(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	mustStore(ctx, t, store, timeout("a", now), timeout("b", now))

	cancelled, err := store.Cancel(ctx, "a")
	require.NoError(t, err)
	require.True(t, cancelled)
	cancelled, err = store.Cancel(ctx, "a")
	require.NoError(t, err)
	require.False(t, cancelled, "second Cancel")

	_, err = store.Peek(ctx, "a")
	require.ErrorIs(t, err, persistence.ErrNotFound)
	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, ids, "a cancelled timeout is never claimed")
}

func (s suite) testCancelByOwner(t *testing.T) {
	store, ctx := s.setup(t)
	now := base()
	owned := func(id, owner string) persistence.Timeout {
		to := timeout(id, now)
		to.Owner = owner
		return to
	}
	mustStore(ctx, t, store,
		owned("a1", "order-a"), owned("a2", "order-a"), owned("a3", "order-a"),
		owned("b1", "order-b"), owned("b2", "order-b"),
		owned("none", ""),
		owned("prefix", "order-a-2"),
	)

	n, err := store.CancelByOwner(ctx, "order-a")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = store.CancelByOwner(ctx, "order-a")
	require.NoError(t, err)
	require.Zero(t, n, "second CancelByOwner")

	for _, id := range []string{"a1", "a2", "a3"} {
		_, err := store.Peek(ctx, id)
		require.ErrorIs(t, err, persistence.ErrNotFound, id)
	}

	// An empty owner means "no owner", never "every ownerless timeout": either refuse it or
	// cancel nothing.
	n, err = store.CancelByOwner(ctx, "")
	if err == nil {
		require.Zero(t, n, "CancelByOwner with an empty owner")
	}

	ids, err := store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"b1", "b2", "none", "prefix"}, ids, "other owners' timeouts stay")
}
