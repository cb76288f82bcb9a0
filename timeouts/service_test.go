package timeouts

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// testWork is a service's work that runs until its context ends, and counts what happened.
type testWork struct {
	runs, stops atomic.Int32
	ended       atomic.Bool // the work saw its context end
}

func (w *testWork) service() *service {
	return newService(func(ctx context.Context) {
		w.runs.Add(1)
		<-ctx.Done()
		w.ended.Store(true)
	}, func() { w.stops.Add(1) })
}

func TestServiceStartsThenStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w testWork
		s := w.service()
		require.False(t, closed(s.Started()))
		require.False(t, s.Stopping())

		require.NoError(t, s.Start(context.Background()))
		synctest.Wait()
		require.True(t, closed(s.Started()))
		require.False(t, closed(s.Stopped()), "the work runs until the stop")
		require.False(t, s.Stopping())
		require.EqualValues(t, 1, w.runs.Load())

		s.Stop()
		require.True(t, closed(s.Stopped()), "Stop waits for the work to end")
		require.True(t, w.ended.Load())
		require.True(t, s.Stopping())
		require.EqualValues(t, 1, w.stops.Load())
	})
}

func TestServiceStoppedBeforeItStartedNeverRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w testWork
		s := w.service()
		s.Stop()
		require.True(t, closed(s.Started()), "Started is closed before Stopped")
		require.True(t, closed(s.Stopped()))
		require.ErrorIs(t, s.Start(context.Background()), errStartedTwice)
		synctest.Wait()
		require.Zero(t, w.runs.Load())
		require.EqualValues(t, 1, w.stops.Load(), "onStop runs for a stop before the start too")
	})
}

func TestServiceStopTwiceAndStartTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w testWork
		s := w.service()
		require.NoError(t, s.Start(context.Background()))
		require.ErrorIs(t, s.Start(context.Background()), errStartedTwice)
		s.Stop()
		s.Stop()
		require.True(t, closed(s.Stopped()))
		require.EqualValues(t, 1, w.runs.Load())
		require.EqualValues(t, 1, w.stops.Load(), "onStop runs once")
	})
}

func TestServiceStopsWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w testWork
		s := w.service()
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, s.Start(ctx))
		cancel()
		require.True(t, s.Stopping(), "at once, before the context's AfterFunc runs")
		synctest.Wait()
		require.True(t, closed(s.Stopped()))
		require.EqualValues(t, 1, w.stops.Load())
	})
}

func TestServiceWhoseWorkEndsOnItsOwnIsStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stops atomic.Int32
		s := newService(func(context.Context) {}, func() { stops.Add(1) })
		require.NoError(t, s.Start(context.Background()))
		synctest.Wait()
		require.True(t, closed(s.Stopped()))
		require.True(t, s.Stopping())
		require.EqualValues(t, 1, stops.Load())
	})
}

func TestServiceStopWaitsForTheWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(func(ctx context.Context) {
			<-ctx.Done()
			time.Sleep(time.Minute) // fake time: the work takes a minute to wind down
		}, nil)
		require.NoError(t, s.Start(context.Background()))
		start := time.Now()
		s.Stop()
		require.GreaterOrEqual(t, time.Since(start), time.Minute)
	})
}
