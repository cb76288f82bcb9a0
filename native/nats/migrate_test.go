package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativemigrate"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/wire"
)

// A migration from a store: timeouts due later wait in one schedule each, those past due are
// delivered at once, those for a subject another stream captures stay in the store, named; a
// second run changes nothing.
func TestMigrationIntoSchedules(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	pub := s.publisher(t, true)
	dest := "orders." + unique(t)
	foreign := "foreign." + unique(t)
	other := "other_" + unique(t)
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: other, Subjects: []string{foreign}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.js.DeleteStream(context.Background(), other) })

	const later, past, stuck = 20000, 50, 3
	store := memory.New()
	now := time.Now()
	var ts []persistence.Timeout
	for i := range later {
		ts = append(ts, persistence.Timeout{ID: fmt.Sprintf("later-%05d", i), Destination: dest, Due: now.Add(time.Hour + time.Duration(i)*time.Millisecond),
			Payload: []byte("x"), Metadata: map[string]string{wire.HeaderKey: "k", "n": fmt.Sprint(i)}})
	}
	for i := range past {
		ts = append(ts, persistence.Timeout{ID: fmt.Sprintf("past-%05d", i), Destination: dest, Due: now.Add(-time.Minute), Payload: []byte("x")})
	}
	for i := range stuck {
		ts = append(ts, persistence.Timeout{ID: fmt.Sprintf("stuck-%d", i), Destination: foreign, Due: now.Add(time.Hour), Payload: []byte("x")})
	}
	for _, tm := range ts {
		_, err := store.Store(ctx, tm)
		require.NoError(t, err)
	}

	cfg := nativemigrate.MigrationConfig{Store: store, Target: nativemigrate.NATS(pub), BatchSize: 1000, Workers: 4, Logger: watermill.NopLogger{}}
	_, err = nativemigrate.Migrate(ctx, cfg)
	require.ErrorIs(t, err, nativemigrate.ErrPreflight, "a destination of another stream stops the migration")
	assert.Contains(t, err.Error(), other)

	cfg.SkipUnmigratable = true
	res, err := nativemigrate.Migrate(ctx, cfg)
	require.NoError(t, err)
	t.Logf("migrated %d in %s (%.0f/s)", res.Migrated, res.Elapsed.Round(time.Millisecond), float64(res.Migrated)/res.Elapsed.Seconds())
	assert.Equal(t, later+past, res.Migrated)
	require.Len(t, res.Unmigratable, stuck)
	assert.Contains(t, res.Unmigratable[0].Reason, other)

	stream, err := s.js.Stream(ctx, s.stream)
	require.NoError(t, err)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	assert.Len(t, info.State.Subjects, later+1, "one schedule subject per later timeout, and the destination")
	assert.Equal(t, uint64(past), info.State.Subjects[dest], "past due: delivered at once")
	sv, err := store.(persistence.Handover).Survey(ctx, persistence.MinDue)
	require.NoError(t, err)
	assert.Equal(t, stuck, sv.Count, "the unmigratable stay in the store, not hidden")
	assert.Zero(t, sv.Hidden)

	again, err := nativemigrate.Migrate(ctx, cfg)
	require.NoError(t, err)
	assert.Zero(t, again.Migrated)
	info, err = stream.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(later+past), info.State.Msgs)
}
