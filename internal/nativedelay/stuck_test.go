package nativedelay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestALevelIsStuckOnlyWhenItsQueueStopsMoving: at a deadline its probe missed, a level whose
// queue holds fewer messages than when the deadline was set is moving (thousands expiring
// together ahead of the probe, on a loaded broker) and gets another StuckWait, up to
// maxMovingWait in all; a queue that holds as many or more is stuck.
func TestALevelIsStuckOnlyWhenItsQueueStopsMoving(t *testing.T) {
	t.Parallel()
	sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &watch{deadline: sent.Add(StuckWait), messages: 5000, until: sent.Add(maxMovingWait)}

	now := w.deadline
	require.False(t, w.late(now, 3000), "2,000 moved on since the probe was sent")
	require.Equal(t, now.Add(StuckWait), w.deadline)
	require.Equal(t, 3000, w.messages)

	now = w.deadline
	require.False(t, w.late(now, 1), "moving still")
	now = w.deadline
	require.True(t, w.late(now, 1), "nothing moved since the last deadline")

	held := &watch{deadline: sent.Add(StuckWait), messages: 40, until: sent.Add(maxMovingWait)}
	require.True(t, held.late(held.deadline, 45), "more than before: held at the head while others came in")

	slow := &watch{deadline: sent.Add(StuckWait), messages: 100000, until: sent.Add(maxMovingWait)}
	for n := 99000; ; n -= 1000 {
		now := slow.deadline
		if slow.late(now, n) {
			require.False(t, now.Before(slow.until), "stuck only once maxMovingWait is over")
			break
		}
		require.False(t, slow.deadline.After(slow.until), "no deadline past until")
	}
}
