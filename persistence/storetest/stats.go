package storetest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// testStatsExact: Stats is exact after many writers stored, claimed, removed, parked, unparked,
// cancelled and rescheduled timeouts at once: it equals what a read of every timeout counts, and
// its Claimed is the due timeouts a claim at the same now cannot take. A store that keeps counts
// as rows change (PostgreSQL) must count each change once, whatever runs beside it.
func (s suite) testStatsExact(t *testing.T) {
	store, ctx := s.setup(t)
	inspector, ok := store.(persistence.Inspector)
	if !ok {
		t.Skipf("%T does not implement persistence.Inspector", store)
	}
	parker, _ := store.(persistence.Parker)
	scheduler, _ := store.(persistence.Scheduler)
	batch, _ := store.(persistence.BatchStore)
	now := base()
	destinations := []string{"orders", "invoices", "shipping"}
	newTimeout := func(id string, r *rand.Rand) persistence.Timeout {
		to := timeout(id, now.Add(time.Duration(r.IntN(120)-60)*time.Minute))
		to.Destination = destinations[r.IntN(len(destinations))]
		return to
	}

	const writers, rounds = 4, 100
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 31))
			// Few ids, so that each operation often meets a stored, claimed or parked one.
			id := func() string { return fmt.Sprintf("w%d-%d", w, r.IntN(24)) }
			for i := range rounds {
				var err error
				switch op := r.IntN(9); {
				case op < 3:
					_, err = store.Store(ctx, newTimeout(id(), r))
				case op == 3 && batch != nil:
					_, err = batch.StoreMany(ctx, []persistence.Timeout{newTimeout(id(), r), newTimeout(id(), r), newTimeout(fmt.Sprintf("b%d-%d", w, i), r)})
				case op == 4:
					var ids []string
					ids, err = store.ClaimDue(ctx, now, 3, time.Hour)
					if err == nil && len(ids) > 0 && r.IntN(2) == 0 {
						_, err = store.Remove(ctx, ids[0])
					}
				case op == 5 && parker != nil:
					_, err = parker.Park(ctx, id(), "stats test")
				case op == 6 && parker != nil:
					_, err = parker.Unpark(ctx, []string{id(), id()})
				case op == 7 && scheduler != nil:
					_, err = scheduler.Reschedule(ctx, id(), now.Add(time.Duration(r.IntN(120)-60)*time.Minute), now)
				default:
					_, err = store.Cancel(ctx, id())
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	st, err := inspector.Stats(ctx, now)
	require.NoError(t, err)
	var (
		want  = persistence.Stats{ByDestination: map[string]int{}}
		after persistence.Position
	)
	for {
		page, err := inspector.List(ctx, persistence.ListOptions{Limit: 100, After: after})
		require.NoError(t, err)
		for _, to := range page {
			want.Pending++
			want.ByDestination[to.Destination]++
			if to.Parked != "" {
				want.Parked++
			} else if !to.Due.After(now) {
				want.DueNow++
			}
			if want.Earliest.IsZero() || to.Due.Before(want.Earliest) {
				want.Earliest = to.Due
			}
			if to.Due.After(want.Latest) {
				want.Latest = to.Due
			}
		}
		if len(page) < 100 {
			break
		}
		after = persistence.Position{Due: page[len(page)-1].Due, ID: page[len(page)-1].ID}
	}
	require.NotZero(t, want.Pending, "the writers left timeouts behind")
	require.Equal(t, want.Pending, st.Pending, "Pending")
	require.Equal(t, want.Parked, st.Parked, "Parked")
	require.Equal(t, want.DueNow, st.DueNow, "DueNow")
	require.Equal(t, want.ByDestination, st.ByDestination, "ByDestination")
	require.True(t, want.Earliest.Equal(st.Earliest), "Earliest: %s, want %s", st.Earliest, want.Earliest)
	require.True(t, want.Latest.Equal(st.Latest), "Latest: %s, want %s", st.Latest, want.Latest)
	// Every claimed timeout is due (a claim takes only due ones, and Reschedule leaves claimed
	// ones alone): those due that a claim cannot take are the claimed ones.
	claimable, err := store.ClaimDue(ctx, now, want.Pending+1, time.Hour)
	require.NoError(t, err)
	require.Equal(t, st.DueNow-len(claimable), st.Claimed, "Claimed")
	st, err = inspector.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, st.DueNow, st.Claimed, "every due timeout is claimed now")
}
