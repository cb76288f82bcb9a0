package rabbitmq_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/internal/nativemigrate"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
)

// memHandover is the memory store as a persistence.Handover, which migration needs.
type memHandover interface {
	persistence.Store
	persistence.Handover
}

// migrationFixture is a topology, a destination queue and a memory store of timeouts for it.
type migrationFixture struct {
	b     *broker
	pub   *rabbitmq.Publisher
	store memHandover
	dest  string
}

func newMigrationFixture(t *testing.T) *migrationFixture {
	t.Helper()
	b := newBroker(t, rabbitmq.Quorum)
	b.setup(t)
	f := &migrationFixture{b: b, pub: b.publisher(t), store: memory.New().(memHandover), dest: uniqueName(t, "native-dest")}
	b.queue(t, f.dest)
	return f
}

func (f *migrationFixture) add(t *testing.T, id, dest string, due time.Time) {
	t.Helper()
	inserted, err := f.store.Store(context.Background(), persistence.Timeout{
		ID: id, Destination: dest, Due: due, Payload: []byte("payload " + id),
		Metadata: map[string]string{"trace": id},
	})
	require.NoError(t, err)
	require.True(t, inserted)
}

func (f *migrationFixture) config() nativemigrate.MigrationConfig {
	return nativemigrate.MigrationConfig{Store: f.store, Publisher: f.pub, BatchSize: 7, Workers: 3, Logger: watermill.NopLogger{}}
}

func (f *migrationFixture) survey(t *testing.T) persistence.Survey {
	t.Helper()
	sv, err := f.store.Survey(context.Background(), persistence.MinDue)
	require.NoError(t, err)
	return sv
}

// levelMessages counts the messages waiting in the level queues by message id, leaving them
// there. Verify's probes, which wait behind real messages too, are not counted.
func (f *migrationFixture) levelMessages(t *testing.T) map[string]int {
	t.Helper()
	ch, err := f.b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close() // every message got returns to its queue
	ids := map[string]int{}
	for level := 0; level < nativedelay.Levels; level++ {
		for {
			d, ok, err := ch.Get(f.b.topo.Queue(level), false)
			require.NoError(t, err)
			if !ok {
				break
			}
			if _, probe := d.Headers["timeoutmill-probe"]; !probe {
				ids[d.MessageId]++
			}
		}
	}
	return ids
}

// requireOnce fails unless the level queues hold exactly one message of each id.
func (f *migrationFixture) requireOnce(t *testing.T, ids ...string) {
	t.Helper()
	got := f.levelMessages(t)
	want := map[string]int{}
	for _, id := range ids {
		want[id] = 1
	}
	require.Equal(t, want, got)
}

func TestMigrateMovesEveryTimeout(t *testing.T) {
	t.Parallel()
	f := newMigrationFixture(t)
	now := time.Now()
	for i := range 20 {
		f.add(t, fmt.Sprintf("past-%02d", i), f.dest, now.Add(-time.Duration(i+1)*time.Hour))
		f.add(t, fmt.Sprintf("soon-%02d", i), f.dest, now.Add(3*time.Second))
		f.add(t, fmt.Sprintf("later-%02d", i), f.dest, now.Add(time.Duration(i+1)*24*time.Hour))
	}
	var last nativemigrate.Progress
	cfg := f.config()
	cfg.OnProgress = func(p nativemigrate.Progress) { last = p }
	res, err := nativemigrate.Migrate(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 60, res.Migrated)
	require.Empty(t, res.Unmigratable)
	require.Zero(t, res.Released)
	require.Equal(t, nativemigrate.Progress{Total: 60, Done: 60, Migrated: 60, Elapsed: last.Elapsed}, last)
	require.Zero(t, f.survey(t).Count, "the store is empty")

	msgs := f.b.subscribe(t, f.dest)
	got := map[string]time.Time{}
	for len(got) < 40 {
		msg := receive(t, msgs, 30*time.Second)
		require.NotContains(t, got, msg.UUID, "delivered twice")
		require.Equal(t, "payload "+msg.UUID, string(msg.Payload))
		require.Equal(t, msg.UUID, msg.Metadata.Get("trace"))
		require.NotContains(t, msg.Metadata, "x-death")
		got[msg.UUID] = time.Now()
	}
	for i := range 20 {
		require.Contains(t, got, fmt.Sprintf("past-%02d", i))
		soon := fmt.Sprintf("soon-%02d", i)
		require.Contains(t, got, soon)
		require.False(t, got[soon].Before(now.Add(3*time.Second)), "%s delivered early", soon)
	}
	var later []string
	for i := range 20 {
		later = append(later, fmt.Sprintf("later-%02d", i))
	}
	f.requireOnce(t, later...) // the later ones wait in the levels
}

func TestMigratePreflightChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newMigrationFixture(t)
	now := time.Now()
	missing := uniqueName(t, "native-missing")
	f.add(t, "ok", f.dest, now.Add(time.Hour))
	f.add(t, "to-missing", missing, now.Add(time.Hour))
	f.add(t, "wildcard", "orders.#", now.Add(time.Hour))
	f.add(t, "too-late", f.dest, now.Add(rabbitmq.MaxDelay+time.Hour))

	_, err := nativemigrate.Migrate(ctx, f.config())
	require.ErrorIs(t, err, nativemigrate.ErrPreflight)
	require.ErrorContains(t, err, "destination queue "+missing+" does not exist (1 timeout(s))")
	require.ErrorContains(t, err, `destination "orders.#" cannot be reached natively`)
	require.ErrorContains(t, err, "longer than the 268,435,455 s")
	sv := f.survey(t)
	require.Equal(t, 4, sv.Count)
	require.Zero(t, sv.Hidden)
	exists, err := f.pub.DestinationExists(ctx, missing)
	require.NoError(t, err)
	require.False(t, exists, "the preflight creates no queue")

	// With a queue of the topology gone, the preflight names it.
	_, err = f.b.channel(t).QueueDelete(f.b.topo.Queue(9), false, false, false)
	require.NoError(t, err)
	cfg := f.config()
	cfg.SkipUnmigratable = true
	_, err = nativemigrate.Migrate(ctx, cfg)
	require.ErrorIs(t, err, nativemigrate.ErrPreflight)
	require.ErrorContains(t, err, "queue "+f.b.topo.Queue(9)+" is missing")
	require.Equal(t, 4, f.survey(t).Count)
}

func TestMigrateLeavesTheUnmigratableAndSaysWhy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newMigrationFixture(t)
	now := time.Now()
	missing := uniqueName(t, "native-missing")
	for i := range 10 {
		f.add(t, fmt.Sprintf("ok-%d", i), f.dest, now.Add(time.Hour))
	}
	f.add(t, "to-missing", missing, now.Add(-time.Hour))
	f.add(t, "wildcard", "orders.#", now.Add(time.Hour))
	f.add(t, "too-late", f.dest, now.Add(rabbitmq.MaxDelay+time.Hour))

	cfg := f.config()
	cfg.SkipUnmigratable = true
	res, err := nativemigrate.Migrate(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 10, res.Migrated)
	reasons := map[string]string{}
	for _, u := range res.Unmigratable {
		reasons[u.ID] = u.Reason
	}
	require.Len(t, reasons, 3)
	require.Contains(t, reasons["to-missing"], "does not exist")
	require.Contains(t, reasons["wildcard"], "wildcard")
	require.Contains(t, reasons["too-late"], "268,435,455")
	require.Equal(t, 3, res.Released)

	sv := f.survey(t)
	require.Equal(t, 3, sv.Count, "the unmigratable stay in the store")
	require.Zero(t, sv.Hidden, "and are back with the timeout manager")
	claimed, err := f.store.ClaimDue(ctx, now, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"to-missing"}, claimed, "the past-due one is claimable at once again")
}

func TestMigrateCutoffLeavesEarlierTimeouts(t *testing.T) {
	t.Parallel()
	f := newMigrationFixture(t)
	now := time.Now()
	f.add(t, "soon", f.dest, now.Add(10*time.Minute))
	f.add(t, "later", f.dest, now.Add(2*time.Hour))
	cfg := f.config()
	cfg.Cutoff = now.Add(time.Hour)
	res, err := nativemigrate.Migrate(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 1, res.Migrated)
	require.Equal(t, 1, res.Preflight.Survey.Count)
	_, err = f.store.Peek(context.Background(), "soon")
	require.NoError(t, err, "due before the cutoff: left to the timeout manager")
}

func TestMigrateInterruptedPutsUnsentBackAndARerunFinishes(t *testing.T) {
	t.Parallel()
	f := newMigrationFixture(t)
	now := time.Now()
	const n = 200
	for i := range n {
		f.add(t, fmt.Sprintf("t-%03d", i), f.dest, now.Add(time.Duration(i+1)*time.Hour))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg := f.config()
	cfg.OnProgress = func(p nativemigrate.Progress) {
		if p.Done >= 20 {
			cancel()
		}
	}
	res, err := nativemigrate.Migrate(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)
	require.Positive(t, res.Migrated)
	require.Less(t, res.Migrated, n)
	sv := f.survey(t)
	require.Equal(t, n-res.Migrated, sv.Count, "every timeout is migrated or still stored")
	require.Zero(t, sv.Hidden, "nothing stays hidden after an interruption")

	res2, err := nativemigrate.Migrate(context.Background(), f.config())
	require.NoError(t, err)
	require.Equal(t, n, res.Migrated+res2.Migrated)
	require.Zero(t, f.survey(t).Count)
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("t-%03d", i))
	}
	f.requireOnce(t, all...)
}

func TestMigrateTakesOverWhatAStoppedMigrationHid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newMigrationFixture(t)
	now := time.Now()
	for i := range 30 {
		f.add(t, fmt.Sprintf("t-%02d", i), f.dest, now.Add(time.Duration(i+1)*time.Hour))
	}
	// A migration that hid a batch and was killed before sending it.
	hidden, err := f.store.Hide(ctx, now, persistence.MinDue, 12, persistence.HiddenFrom.Add(time.Hour))
	require.NoError(t, err)
	require.Len(t, hidden, 12)

	cfg := f.config()
	cfg.Cutoff = now.Add(5*time.Hour + time.Minute) // t-05 and later; t-00 .. t-04 were hidden
	res, err := nativemigrate.Migrate(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 7, res.Preflight.Survey.Hidden, "hidden and due after the cutoff")
	require.Equal(t, 25, res.Migrated)
	require.Equal(t, 5, res.Released, "hidden, but due before the cutoff: back to the timeout manager")
	sv := f.survey(t)
	require.Equal(t, 5, sv.Count)
	require.Zero(t, sv.Hidden)

	res, err = nativemigrate.Migrate(ctx, f.config())
	require.NoError(t, err)
	require.Equal(t, 5, res.Migrated)
	require.Zero(t, f.survey(t).Count)
}

// seam is persistence.Store under a name that does not hide its Store method when embedded.
type seam interface{ persistence.Store }

// oneByOne is a store without RemoveMany: the migration removes each timeout with Remove.
type oneByOne struct {
	seam
	persistence.Handover
}

// batchRemover is a store with RemoveMany, counting its calls.
type batchRemover struct {
	seam
	persistence.Handover
	calls atomic.Int32
}

func (b *batchRemover) RemoveMany(ctx context.Context, ids []string) ([]string, error) {
	b.calls.Add(1)
	var removed []string
	for _, id := range ids {
		ok, err := b.Remove(ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			removed = append(removed, id)
		}
	}
	return removed, nil
}

func TestMigrateRemovesInOneCallWhereTheStoreCanAndOneByOneOtherwise(t *testing.T) {
	t.Parallel()
	f := newMigrationFixture(t)
	now := time.Now()
	for i := range 40 {
		f.add(t, fmt.Sprintf("t-%02d", i), f.dest, now.Add(time.Duration(i+1)*time.Hour))
	}
	cfg := f.config()
	cfg.Workers, cfg.BatchSize = 1, 10
	cfg.Store = oneByOne{seam: f.store, Handover: f.store}
	cfg.Cutoff = now.Add(20*time.Hour + time.Minute) // t-20 and later
	res, err := nativemigrate.Migrate(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 20, res.Migrated)

	many := &batchRemover{seam: f.store, Handover: f.store}
	cfg.Store, cfg.Cutoff = many, time.Time{}
	res, err = nativemigrate.Migrate(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 20, res.Migrated)
	require.Equal(t, int32(2), many.calls.Load(), "one RemoveMany per batch")
	require.Zero(t, f.survey(t).Count)
}
