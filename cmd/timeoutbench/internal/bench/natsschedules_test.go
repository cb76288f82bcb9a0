package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

// TestNATSScheduleRigsDeliverWhenTheServerSays: JetStream's schedules, through native/nats,
// written by hand or with WithScheduleAt, deliver a delayed message with its body and headers to the destination; the
// others, to the nanosecond, never early.
func TestNATSScheduleRigsDeliverWhenTheServerSays(t *testing.T) {
	url := testenv.NATSURL(t)
	for _, sys := range natsScheduleSystems() {
		t.Run(sys.Name, func(t *testing.T) {
			env := Env{NATSURL: url, TempDir: t.TempDir(), Logger: watermill.NopLogger{}}
			dest := testenv.UniqueName(t, "tbsched")
			rig, err := sys.Open(t.Context(), env, dest)
			require.NoError(t, err)
			defer func() { require.NoError(t, rig.Close()) }()

			msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
			msg.Metadata.Set("k", "v")
			due := time.Now().Add(1500 * time.Millisecond)
			rig.Mark(msg, due)
			require.NoError(t, rig.Publish(dest, msg))
			select {
			case got := <-rig.Arrivals:
				arrived := time.Now()
				got.Ack()
				require.Equal(t, msg.UUID, got.UUID)
				require.Equal(t, "x", string(got.Payload))
				require.Equal(t, "v", got.Metadata.Get("k"))
				require.Greater(t, arrived.Sub(due), -time.Second, "WithScheduleAt drops at most the fraction of a second")
				if sys.Name != natsScheduleAtName {
					require.False(t, arrived.Before(due), "delivered %s before due", due.Sub(arrived))
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the delayed message did not arrive within 30 s")
			}
		})
	}
}

// TestNATSHybridDeliversThroughTheScheduleAndTheStore: the hybrid prototype delivers a message
// due in 2.5 s (a NATS schedule, then the store) and one due in 0.5 s (the store alone), each
// with its headers, never early.
func TestNATSHybridDeliversThroughTheScheduleAndTheStore(t *testing.T) {
	env := Env{NATSURL: testenv.NATSURL(t), PostgresDSN: testenv.PostgresDSN(t), TempDir: t.TempDir(), Logger: watermill.NopLogger{}}
	dest := testenv.UniqueName(t, "tbhybrid")
	rig, err := natsHybrid().Open(t.Context(), env, dest)
	require.NoError(t, err)
	defer func() { require.NoError(t, rig.Close()) }()

	due := map[string]time.Time{}
	scheduled := map[string]bool{}
	for _, d := range []time.Duration{2500 * time.Millisecond, 500 * time.Millisecond} {
		msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
		msg.Metadata.Set("k", "v")
		due[msg.UUID] = time.Now().Add(d)
		scheduled[msg.UUID] = d > hybridLead
		rig.Mark(msg, due[msg.UUID])
		require.NoError(t, rig.Publish(dest, msg))
	}
	for range len(due) {
		select {
		case got := <-rig.Arrivals:
			arrived := time.Now()
			got.Ack()
			at, ok := due[got.UUID]
			require.True(t, ok, "an unknown message %s", got.UUID)
			require.Equal(t, "v", got.Metadata.Get("k"))
			require.False(t, arrived.Before(at), "delivered %s before due", at.Sub(arrived))
			// The hybrid marks what it handed to a schedule; the server's own headers are left out.
			require.Equal(t, scheduled[got.UUID], got.Metadata.Get(hybridScheduledHeader) != "", "went through a NATS schedule")
			require.Empty(t, got.Metadata.Get(jetstream.SchedulerHeader))
			delete(due, got.UUID)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d messages did not arrive within 30 s", len(due))
		}
	}
}

// TestNATSTargetsReadTheScheduleRows: native/nats is held to its yardstick's drain and to no
// early arrival, with WithScheduleAt's early arrivals shown beside it; the yardsticks' own early
// arrivals are not timeoutmill's.
func TestNATSTargetsReadTheScheduleRows(t *testing.T) {
	t.Parallel()
	results := []Result{
		{System: natsNativeName, Kind: KindPrecision, Counted: true, Messages: 4000},
		{System: natsNativeName, Kind: KindBacklog, Counted: true, Messages: 20000, Figures: map[string]float64{"drain": 44000}},
		{System: natsRawSchedulesName, Kind: KindBacklog, Counted: true, Reference: true, Messages: 20000, Figures: map[string]float64{"drain": 50000}},
		{System: natsScheduleAtName, Kind: KindPrecision, Counted: true, Reference: true, Messages: 4000, Early: 3973},
		{System: natsScheduleAtName, Kind: KindBacklog, Counted: true, Reference: true, Messages: 20000, Early: 20000},
	}
	got := map[string]Target{}
	for _, tg := range Targets(results) {
		got[tg.Goal] = tg
	}
	drain := got["drain NATS native schedules ≥ 0.9× the plain client's raw schedule headers"]
	require.Equal(t, "no", drain.Met)
	require.Contains(t, drain.Measured, "44,000/s vs 50,000/s = 0.88×")
	noEarly := got["NATS native schedules: 0 early, where WithScheduleAt as users call it delivers early"]
	require.Equal(t, "yes", noEarly.Met)
	require.Contains(t, noEarly.Measured, "native early: precision 0 of 4,000, backlog 0 of 20,000")
	require.Contains(t, noEarly.Measured, "WithScheduleAt early: precision 3,973 (99 %), backlog 20,000 (100 %)")
	require.Equal(t, "yes", got["early = 0 in every timeoutmill scenario"].Met, "the yardsticks' early arrivals are not timeoutmill's")

	results[0].Early = 2
	got = map[string]Target{}
	for _, tg := range Targets(results) {
		got[tg.Goal] = tg
	}
	require.Equal(t, "no", got["NATS native schedules: 0 early, where WithScheduleAt as users call it delivers early"].Met)
	require.Equal(t, "no", got["early = 0 in every timeoutmill scenario"].Met)
	empty := Targets(nil)
	for _, tg := range empty {
		if strings.HasPrefix(tg.Goal, "NATS native") || strings.Contains(tg.Goal, "NATS native schedules ≥") {
			require.Equal(t, "—", tg.Met, "%s without its rows", tg.Goal)
		}
	}
}
