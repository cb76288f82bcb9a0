package acceptance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/wire"
)

// scheduleBackends are the stores the scheduling scenarios run on: the acceptance backends and
// MariaDB, each with RabbitMQ as the transport.
func scheduleBackends() []backend {
	return append(backends(), backend{name: "mariadb", database: func(t *testing.T, endpoint string) func(t *testing.T) persistence.Store {
		dsn, _ := testenv.MySQLDatabase(t)
		return func(t *testing.T) persistence.Store {
			s, err := mysql.Open(context.Background(), mysql.Config{DSN: dsn, Endpoint: endpoint})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			return s
		}
	}})
}

// schedulingNode runs a manager on RabbitMQ and b's store for a scenario of its own, and returns
// it, a destination and what arrives there.
func schedulingNode(t *testing.T, b backend, tag string) (*node, string, <-chan arrival) {
	t.Helper()
	e := newEnv(t, tag)
	n := startNode(t, e, "node", b.database(t, e.endpoint)(t), nil)
	dest := e.queue("reminders")
	return n, dest, receive(t, e, dest)
}

// scheduled is one message a scenario scheduled, and the due time it must not arrive before.
type scheduled struct {
	msg  *message.Message
	due  time.Time
	gone bool // cancelled or replaced: it must never arrive
}

// tallySchedule receives what arrives on queue until every expected message came, then a little longer,
// and counts lost, duplicated, early and wrong deliveries.
func tallySchedule(t *testing.T, name string, arrivals <-chan arrival, want map[string]*scheduled) {
	t.Helper()
	expected := 0
	for _, s := range want {
		if !s.gone {
			expected++
		}
	}
	seen := map[string]int{}
	var early, wrong int
	got := 0
	for got < expected {
		select {
		case a := <-arrivals:
			s, ok := want[a.msg.UUID]
			seen[a.msg.UUID]++
			switch {
			case !ok || s.gone:
				wrong++
			case seen[a.msg.UUID] == 1:
				got++
				if a.at.Before(s.due) {
					early++
					t.Errorf("%s: %s arrived at %s, before its due time %s", name, a.msg.UUID, a.at.Format(time.RFC3339Nano), s.due.Format(time.RFC3339Nano))
				}
				due, err := wireparse.ParseExpire(a.msg.Metadata.Get(wire.HeaderDue))
				require.NoError(t, err, "%s: the delivered message says when it was due", name)
				// Times given as now (or past) become the manager's now, a moment after s.due.
				require.False(t, due.Before(wireparse.RoundUp(s.due)), "%s: %s due header %s, scheduled for %s", name, a.msg.UUID, due, s.due)
				require.False(t, a.at.Before(due), "%s: %s arrived at %s, before the due time it carries %s", name, a.msg.UUID, a.at, due)
			}
		case <-time.After(stallBound):
			t.Fatalf("%s: stalled after %d of %d deliveries", name, got, expected)
		}
	}
	// Late strays: a cancelled, replaced or duplicated message would arrive about now.
	for quiet := time.After(2 * time.Second); ; {
		select {
		case a := <-arrivals:
			seen[a.msg.UUID]++
			if s, ok := want[a.msg.UUID]; !ok || s.gone {
				wrong++
			}
			continue
		case <-quiet:
		}
		break
	}
	dups := 0
	for _, n := range seen {
		if n > 1 {
			dups += n - 1
		}
	}
	t.Logf("%s: scheduled %d, expected %d, delivered %d, lost %d, duplicated %d, wrong %d, early %d",
		name, len(want), expected, got, expected-got, dups, wrong, early)
	require.Zero(t, wrong, "%s: cancelled, replaced or unknown messages delivered", name)
	require.Zero(t, dups, "%s: duplicates", name)
	require.Zero(t, early, "%s: early", name)
}

func newDelayed(payload string, due time.Time) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	timeouts.DeliverAt(msg, due)
	return msg
}

// TestScheduleCancelAtOnce: 1,000 timeouts scheduled and every other one cancelled right after
// Schedule returned: every Cancel finds its timeout, none of them arrives, the others all do.
func TestScheduleCancelAtOnce(t *testing.T) {
	for _, b := range scheduleBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			n, dest, arrivals := schedulingNode(t, b, "sched-cancel")
			ctx := t.Context()
			want := map[string]*scheduled{}
			for i := range 1000 {
				// Due a while after its own Schedule: a loaded machine may take longer than that
				// for all 1,000, and a timeout delivered already cannot be cancelled.
				due := time.Now().Add(5 * time.Second)
				msg := newDelayed(fmt.Sprint(i), due)
				res, err := n.manager.Schedule(ctx, dest, msg)
				require.NoError(t, err)
				s := &scheduled{msg: msg, due: due}
				want[res.ID] = s
				if i%2 == 0 {
					cancelled, err := n.manager.Cancel(ctx, res.ID)
					require.NoError(t, err)
					require.True(t, cancelled, "Cancel right after Schedule of %s", res.ID)
					s.gone = true
				}
			}
			tallySchedule(t, "cancel at once on "+b.name, arrivals, want)
		})
	}
}

// TestScheduleReschedule: 1,000 timeouts rescheduled to now, earlier and later: each arrives
// once, at its new due time or after, never at its old one.
func TestScheduleReschedule(t *testing.T) {
	for _, b := range scheduleBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			n, dest, arrivals := schedulingNode(t, b, "sched-resched")
			ctx := t.Context()
			want := map[string]*scheduled{}
			for i := range 1000 {
				start := time.Now()
				msg := newDelayed(fmt.Sprint(i), start.Add(5*time.Second))
				res, err := n.manager.Schedule(ctx, dest, msg)
				require.NoError(t, err)
				var at time.Time
				switch i % 3 {
				case 0:
					at = start.Add(-time.Minute) // now
				case 1:
					at = start.Add(2 * time.Second) // earlier
				case 2:
					at = start.Add(8 * time.Second) // later
				}
				before := time.Now()
				ok, err := n.manager.Reschedule(ctx, res.ID, at)
				require.NoError(t, err)
				require.True(t, ok, "Reschedule of pending %s", res.ID)
				// A time already past becomes the manager's now, which is the store's clock as
				// far as it has certainly reached it: a moment behind this process's clock, by
				// the measurement's error bound. A second tells it from the past time given.
				want[res.ID] = &scheduled{msg: msg, due: max64(at, before.Add(-time.Second))}
			}
			tallySchedule(t, "reschedule on "+b.name, arrivals, want)
		})
	}
}

// max64 is the later of two times.
func max64(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestScheduleKeyReplaceConcurrently: 8 schedulers replace the timeouts of 100 keys at once, 1,000
// schedules in all: one timeout per key is left, and once rescheduled to now each key is
// delivered once, with the message that held it last.
func TestScheduleKeyReplaceConcurrently(t *testing.T) {
	for _, b := range scheduleBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			n, dest, arrivals := schedulingNode(t, b, "sched-key")
			ctx := t.Context()
			// Due far ahead while the schedulers race, so that no holder is claimed meanwhile; the
			// holders are then rescheduled to now.
			far := time.Now().Add(time.Hour)
			const schedulers, keys, total = 8, 100, 1000
			var (
				mu    sync.Mutex
				all   = map[string]*scheduled{}
				wg    sync.WaitGroup
				errs  = make(chan error, schedulers)
				count = map[persistence.Outcome]int{}
			)
			for w := range schedulers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < total; i += schedulers {
						msg := newDelayed(fmt.Sprintf("key %d from %d", i%keys, w), far)
						timeouts.WithKey(msg, fmt.Sprintf("order-%d/payment", i%keys), persistence.KeyReplace)
						res, err := n.manager.Schedule(ctx, dest, msg)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						all[msg.UUID] = &scheduled{msg: msg, gone: true}
						count[res.Outcome]++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			require.NoError(t, <-errs)
			t.Logf("outcomes: %v", count)
			require.Equal(t, keys, count[persistence.Created], "one created per key")
			require.Equal(t, total-keys, count[persistence.Replaced])
			for k := range keys {
				list, err := n.manager.List(ctx, persistence.ListOptions{Key: fmt.Sprintf("order-%d/payment", k)})
				require.NoError(t, err)
				require.Len(t, list, 1, "one pending timeout holds key %d", k)
				holder := all[list[0].ID]
				holder.due = time.Now()
				ok, err := n.manager.Reschedule(ctx, list[0].ID, holder.due)
				require.NoError(t, err)
				require.True(t, ok, "Reschedule of key %d's holder", k)
				holder.gone = false
			}
			tallySchedule(t, "key replace on "+b.name, arrivals, all)
		})
	}
}
