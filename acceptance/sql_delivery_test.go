package acceptance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

func TestSQLDelayedByTwoSeconds(t *testing.T) {
	t.Parallel()
	forEachSQLBackend(t, func(t *testing.T, e *sqlEnv) {
		store := e.store(t)
		n := startSQLNode(t, e, store, nil)
		dest := "payments"
		delivered := sqlReceive(t, e, dest)

		msg := message.NewMessage(watermill.NewUUID(), []byte("charge order 42"))
		due := time.Now().Add(2 * time.Second)
		timeouts.DeliverAt(msg, due)
		require.NoError(t, n.manager.Publisher().Publish(dest, msg))

		got := await(t, delivered, 2*time.Second+lateBound)
		require.Equal(t, msg.UUID, got.msg.UUID)
		require.Equal(t, "charge order 42", string(got.msg.Payload))
		require.False(t, got.at.Before(due), "delivered %s early", due.Sub(got.at))
		require.Less(t, got.at.Sub(due), lateBound)
		for _, h := range []string{wire.HeaderExpire, wire.HeaderDestination} {
			require.NotContains(t, got.msg.Metadata, h, "routing headers are removed on delivery")
		}
		t.Logf("%s: due %s, delivered %s after it", e.name, due.Format(time.RFC3339Nano), got.at.Sub(due).Round(time.Millisecond))
		requireNothing(t, delivered, 500*time.Millisecond)
		require.Eventually(t, func() bool { return pending(t, store) == 0 }, 5*time.Second, 20*time.Millisecond,
			"a delivered timeout leaves the store")
	})
}

// TestSQLDelayedIntoThePast sends a message due an hour ago the way a program in any language
// can: one INSERT into the Timeouts queue's table, with the two contract headers as JSON.
func TestSQLDelayedIntoThePast(t *testing.T) {
	t.Parallel()
	forEachSQLBackend(t, func(t *testing.T, e *sqlEnv) {
		n := startSQLNode(t, e, e.store(t), nil)
		dest := "audit"
		delivered := sqlReceive(t, e, dest)

		metadata, err := json.Marshal(map[string]string{
			wire.HeaderExpire:      time.Now().Add(-time.Hour).Format(time.RFC3339),
			wire.HeaderDestination: dest,
			"origin":               "psql ✓",
		})
		require.NoError(t, err)
		insert := "INSERT INTO %s (uuid, payload, metadata) VALUES ($1, $2, $3)"
		if e.dialect == sqltransport.MySQL {
			insert = "INSERT INTO %s (uuid, payload, metadata) VALUES (?, ?, ?)"
		}
		_, err = e.db.ExecContext(context.Background(), fmt.Sprintf(insert, e.table(t, wire.TimeoutsQueue(e.endpoint))),
			"sql-producer-1", []byte("an hour late"), string(metadata))
		require.NoError(t, err)
		sent := time.Now()
		got := await(t, delivered, lateBound)
		require.Equal(t, "sql-producer-1", got.msg.UUID)
		require.Equal(t, "an hour late", string(got.msg.Payload))
		require.NotEmpty(t, got.msg.Metadata.Get(wire.HeaderDue), "the delivered message says the due time it was delivered for")
		delete(got.msg.Metadata, wire.HeaderDue)
		require.Equal(t, message.Metadata{"origin": "psql ✓"}, got.msg.Metadata)
		t.Logf("%s: a timeout an hour overdue, written with SQL, was delivered %s after it was sent", e.name, got.at.Sub(sent).Round(time.Millisecond))

		// And through timeouts.Publisher, which sends a message already due straight to its topic.
		direct := message.NewMessage(watermill.NewUUID(), []byte("direct"))
		timeouts.DeliverAt(direct, time.Now().Add(-time.Minute))
		require.NoError(t, n.manager.Publisher().Publish(dest, direct))
		got = await(t, delivered, lateBound)
		require.Equal(t, direct.UUID, got.msg.UUID)
		require.NotContains(t, got.msg.Metadata, wire.HeaderExpire)
		requireNothing(t, delivered, 500*time.Millisecond)
	})
}

func TestSQLNonASCIIHeadersAndAOneMiBBodySurviveByteForByte(t *testing.T) {
	t.Parallel()
	forEachSQLBackend(t, func(t *testing.T, e *sqlEnv) {
		n := startSQLNode(t, e, e.store(t), nil)
		dest := "archive"
		delivered := sqlReceive(t, e, dest)

		body := make([]byte, 1<<20)
		_, err := rand.Read(body)
		require.NoError(t, err)
		body[0], body[1], body[len(body)-1] = 0, 0xff, 0 // NULs and invalid UTF-8 at the edges

		msg := message.NewMessage(watermill.NewUUID(), body)
		headers := map[string]string{
			"trace-id":         "abc-ünïcödé-日本語-✓-🚀",
			"ключ":             "значение",
			"emoji-🔑":          "value with\ttab, \"quotes\", 'apostrophes' and a \\ backslash",
			"empty":            "",
			"rtl":              "שלום עולם",
			"combining":        "e\u0301",
			"json-looking":     `{"a": [1, 2]}`,
			"_watermill_hints": "not ours, kept",
		}
		for k, v := range headers {
			msg.Metadata.Set(k, v)
		}
		timeouts.DeliverAfter(msg, 500*time.Millisecond)
		require.NoError(t, n.manager.Publisher().Publish(dest, msg))

		got := await(t, delivered, lateBound)
		require.Equal(t, msg.UUID, got.msg.UUID)
		require.True(t, bytes.Equal(body, got.msg.Payload), "the 1 MiB body differs (%d bytes received)", len(got.msg.Payload))
		require.Equal(t, msg.Metadata.Get(wire.HeaderExpire), got.msg.Metadata.Get(wire.HeaderDue), "the due time it was delivered for")
		delete(got.msg.Metadata, wire.HeaderDue)
		require.Equal(t, message.Metadata(headers), got.msg.Metadata, "every header as sent, less the routing headers")
	})
}

// TestSQLTwoManagersDeliverEachOfManyTimeoutsExactlyOnce runs two instances of one endpoint (two
// routers, each with pools of its own and a store handle of its own on one database), as two
// `timeoutmill run` processes would, and schedules 2,000 timeouts all due at one instant. Each
// must arrive once: nothing crashes here, so no duplicate is acceptable, in either mode.
func TestSQLTwoManagersDeliverEachOfManyTimeoutsExactlyOnce(t *testing.T) {
	t.Parallel()
	const count = 2000
	forEachSQLBackend(t, func(t *testing.T, e *sqlEnv) {
		storeA, storeB := e.store(t), e.store(t)
		a := startSQLNode(t, e, storeA, nil)
		startSQLNode(t, e, storeB, nil)
		dest := "due"
		delivered := sqlReceive(t, e, dest)

		due := time.Now().Add(10 * time.Second)
		ids := make(map[string]bool, count)
		msgs := make([]*message.Message, count)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "%d", i))
			timeouts.DeliverAt(msgs[i], due)
			ids[msgs[i].UUID] = true
		}
		start := time.Now()
		publishConcurrently(t, a.manager.Publisher(), dest, msgs, 8)
		published := time.Since(start)
		// Every delayed message taken by a store satellite. (Waiting for the store to hold them
		// all would wait forever when storing outlasts the due time: dispatching starts then.)
		timeoutsTable := e.table(t, wire.TimeoutsQueue(e.endpoint))
		require.Eventually(t, func() bool { return e.waiting(t, timeoutsTable) == 0 }, time.Until(due)+time.Minute, 20*time.Millisecond,
			"all stored")
		stored := time.Since(start)
		t.Logf("%s: published %d delayed messages in %s (%.0f msg/s, 8 goroutines); all stored after %s",
			e.name, count, published.Round(time.Millisecond), count/published.Seconds(), stored.Round(time.Millisecond))
		if time.Now().After(due) {
			t.Logf("%s: storing outlasted the due time: the delivery figure below includes storing", e.name)
		}

		seen := make(map[string]int, count)
		var first, last time.Time
		for len(seen) < count {
			got := await(t, delivered, time.Until(due)+2*time.Minute)
			require.False(t, got.at.Before(wireparse.RoundUp(due)), "message %s delivered %s early", got.msg.UUID, due.Sub(got.at))
			require.True(t, ids[got.msg.UUID], "unknown message %s", got.msg.UUID)
			seen[got.msg.UUID]++
			require.Equal(t, 1, seen[got.msg.UUID], "message %s delivered twice", got.msg.UUID)
			if first.IsZero() {
				first = got.at
			}
			last = got.at
		}
		requireNothing(t, delivered, 3*time.Second) // duplicates would come now, if at all
		require.Eventually(t, func() bool { return pending(t, storeA) == 0 }, lateBound, 50*time.Millisecond)
		spread := last.Sub(due)
		t.Logf("%s: %d timeouts due at one instant: first delivered %s after due, last %s after due (%.0f deliveries/s), each exactly once",
			e.name, count, first.Sub(due).Round(time.Millisecond), spread.Round(time.Millisecond), count/spread.Seconds())
	})
}
