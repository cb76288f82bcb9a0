package stopcycles

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTwiceBeforeStop(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Process 0 runs until its stop begins at 1000 ms and ends at 1010 ms, process 1 until 2020 ms,
	// and process 2, the last, until 3030 ms.
	began := []time.Time{at(1000), at(2020), at(3030)}
	for _, c := range []struct {
		name       string
		deliveries []delivery
		want       int
	}{
		{"once", []delivery{{at(500), 0}}, -1},
		{"twice by a running process", []delivery{{at(500), 0}, {at(725), 0}}, 0},
		{"twice by the last process before its stop", []delivery{{at(2500), 2}, {at(2600), 2}}, 2},
		{"again by the same process while it stops", []delivery{{at(999), 0}, {at(1005), 0}}, -1},
		{"twice while it stops", []delivery{{at(1001), 0}, {at(1005), 0}}, -1},
		{"again by the next process", []delivery{{at(999), 0}, {at(1030), 1}}, -1},
		// A handler of the stopped process 0 records after process 1 delivered the timeout: by
		// the clock, neither delivery is near a stop.
		{"a stopped process's handler records after the next process's delivery",
			[]delivery{{at(1030), 1}, {at(1055), 0}}, -1},
		{"twice by the next process after a late record of the stopped one",
			[]delivery{{at(1030), 1}, {at(1055), 0}, {at(1300), 1}}, 1},
	} {
		require.Equal(t, c.want, twiceBeforeStop(c.deliveries, began), c.name)
	}
}
