package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/dashboard"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// overviewCalls calls of CountDue and of the dashboard's overview are timed on each side.
const overviewCalls = 5

// dueBounds are the bounds the dashboard's overview counts exactly: now and every window's end.
var dueBounds = []time.Duration{time.Nanosecond, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour,
	7 * 24 * time.Hour}

// overviewTimes are the p50s of one side's CountDue, CountOwners (the dashboard's top 100) and
// dashboard overview (GET api/stats).
type overviewTimes struct{ countDue, countOwners, overview time.Duration }

// timeOverview times overviewCalls calls of CountDue, with the dashboard's bounds, of
// CountOwners, and of the dashboard's overview (Stats, CountOwners, CountDue and a List of its
// sample), on each side in turns. The
// overview is served by a manager that never runs, on each side's store.
func timeOverview(ctx context.Context, sides []*scale) ([]overviewTimes, error) {
	handlers := make([]http.Handler, len(sides))
	for i, s := range sides {
		pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		defer pubSub.Close()
		m, err := timeouts.NewManager(timeouts.Config{Endpoint: s.endpoint, Store: s.store, Publisher: pubSub, Subscriber: pubSub}, watermill.NopLogger{})
		if err != nil {
			return nil, fmt.Errorf("overview: %w", err)
		}
		if handlers[i], err = dashboard.New(m, dashboard.Config{}); err != nil {
			return nil, fmt.Errorf("overview: %w", err)
		}
	}
	counts, owners, overviews := make([][]time.Duration, len(sides)), make([][]time.Duration, len(sides)), make([][]time.Duration, len(sides))
	for range overviewCalls {
		for i, s := range sides {
			start := time.Now()
			bounds := make([]time.Time, len(dueBounds))
			for j, d := range dueBounds {
				bounds[j] = start.Add(d)
			}
			if _, err := s.store.CountDue(ctx, bounds); err != nil {
				return nil, fmt.Errorf("count due: %w", err)
			}
			counts[i] = append(counts[i], time.Since(start))

			start = time.Now()
			if _, err := s.store.CountOwners(ctx, 101); err != nil {
				return nil, fmt.Errorf("count owners: %w", err)
			}
			owners[i] = append(owners[i], time.Since(start))

			start = time.Now()
			rec := httptest.NewRecorder()
			handlers[i].ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/stats", nil))
			if rec.Code != http.StatusOK {
				return nil, fmt.Errorf("overview: status %d: %s", rec.Code, rec.Body)
			}
			overviews[i] = append(overviews[i], time.Since(start))
		}
	}
	out := make([]overviewTimes, len(sides))
	for i := range sides {
		out[i] = overviewTimes{countDue: p50(counts[i]), countOwners: p50(owners[i]), overview: p50(overviews[i])}
	}
	return out, nil
}

func p50(ds []time.Duration) time.Duration {
	return percentile(slices.Sorted(slices.Values(ds)), 0.5)
}

// overviewNote adds the p50s of CountDue and of the overview to a scale row.
func overviewNote(r *Result, t overviewTimes) {
	r.Figures["count_due_p50_ms"] = float64(t.countDue) / float64(time.Millisecond)
	r.Figures["count_owners_p50_ms"] = float64(t.countOwners) / float64(time.Millisecond)
	r.Figures["overview_p50_ms"] = float64(t.overview) / float64(time.Millisecond)
	r.Notes = append(r.Notes, fmt.Sprintf("CountDue (the dashboard's %d bounds) p50 %s ms; CountOwners (top 101) p50 %s ms; dashboard overview (api/stats) p50 %s ms (%d calls)",
		len(dueBounds), millis(t.countDue), millis(t.countOwners), millis(t.overview), overviewCalls))
}
