package acceptance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/wire"
)

// TestFaultCompetingInstancesOneKilled runs three `timeoutmill run` processes on one PostgreSQL
// store and one broker under load and kills one with SIGKILL midway. Nothing may be lost, and
// no timeout the killed instance had not touched may arrive twice: a timeout is only touched by
// an instance that claimed it or holds its dispatcher message, which needs it to be due, so every
// timeout due after the kill (plus a second for clocks and queues) is one it cannot have touched.
func TestFaultCompetingInstancesOneKilled(t *testing.T) {
	t.Parallel()
	skipFaultShort(t)
	count := 6000
	if !longFaultCases() {
		count = 3000
	}
	e := newEnv(t, "compete")
	dsn := postgresDatabase(t, testenv.PostgresDSN(t))
	dest := e.queue("due")
	client := newBrokerClient(t, e.url)
	var instances []*service
	for i := range 3 {
		args := runArgs(e.endpoint, dsn, e.url, e.errorQueue, "--close-timeout", "10s", "--instance", fmt.Sprintf("compete-%d", i))
		instances = append(instances, startService(t, fmt.Sprintf("compete-%d", i), args...))
	}
	got := client.consume(t, dest)
	errs := client.consume(t, e.errorQueue)

	// Sent over about 10 s, due from 2 s on over 20 s.
	msgs := newTimeouts(count, dest, time.Now().Add(2*time.Second), 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sent := client.sendPaced(ctx, wire.TimeoutsQueue(e.endpoint), msgs, count/20, 500*time.Millisecond)

	require.True(t, got.waitDistinct(count/5, 3*time.Minute), "a fifth delivered before the kill (%d so far)", got.distinct())
	victim := instances[1]
	deliveredAtKill := got.distinct()
	victim.kill()
	killedAt := time.Now()
	require.NoError(t, <-sent)

	require.True(t, got.waitDistinct(count, 4*time.Minute), "all delivered after the kill (%d of %d)", got.distinct(), count)
	allAt := time.Now()
	drain := waitDrained(t, client, dsn, e.endpoint, 2*time.Minute)
	got.quiet(2*time.Second, 10*time.Second)

	f := got.figures(ids(msgs))
	untouchedAfter := killedAt.Add(time.Second)
	untouched, untouchedDuplicated := 0, 0
	dupDue := map[string]time.Duration{}
	for _, m := range msgs {
		if m.due.After(untouchedAfter) {
			untouched++
		}
	}
	for _, id := range f.duplicatedIDs {
		for _, m := range msgs {
			if m.id == id {
				dupDue[id] = m.due.Sub(killedAt).Round(time.Millisecond)
				if m.due.After(untouchedAfter) {
					untouchedDuplicated++
				}
			}
		}
	}
	faultLog(t, "%s (error queue %d); 3 instances, one killed after %d deliveries; %d timeouts were due after the kill "+
		"(untouched by the killed instance), %d of them duplicated; duplicated ids due at (relative to the kill): %v; "+
		"all delivered %s after the kill, store drained %s later",
		f, errs.distinct(), deliveredAtKill, untouched, untouchedDuplicated, dupDue,
		allAt.Sub(killedAt).Round(time.Millisecond), drain.Round(time.Millisecond))
	requireNoneLost(t, f)
	require.Zero(t, errs.distinct())
	require.Zero(t, untouchedDuplicated, "no duplicates among timeouts the killed instance had not touched")
	require.LessOrEqual(t, f.duplicated, inflightPerInstance(), "duplicates beyond what the killed instance had in flight")
	require.Positive(t, untouched, "the kill came before the last due time, so the check above means something")

	for _, s := range []*service{instances[0], instances[2]} {
		require.Zero(t, s.count(criticalLogged))
		s.signal(t, sigterm)
	}
	for _, s := range []*service{instances[0], instances[2]} {
		code, _ := s.wait(t, time.Minute)
		require.Equal(t, 0, code)
	}
}
