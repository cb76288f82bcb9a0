package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	nativenats "github.com/timeoutmill/timeoutmill/native/nats"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// Names of the rows of JetStream's own message schedules (NATS 2.12 and later).
const (
	natsNativeName       = "NATS native schedules"
	natsRawSchedulesName = "NATS schedules, plain nats.go client, raw headers"
	natsScheduleAtName   = "NATS schedules, nats.go WithScheduleAt as users call it"
)

// scheduleSubjects is the token between a stream's target subject and a message's id in the
// subject of its schedule: one subject per message, since a schedule is keyed by its subject
// and a second one on the same subject replaces the first.
const scheduleSubjects = ".sched."

// scheduleSubject is where the schedule of the message id for target is published.
func scheduleSubject(target, id string) string { return target + scheduleSubjects + id }

// createScheduleStream creates the stream name capturing target and its schedule subjects, with
// message schedules allowed. A server that does not keep schedules (before 2.12) drops the
// setting and would deliver every message at once: that is an error naming the server.
func createScheduleStream(ctx context.Context, conn *nats.Conn, name, target string, retention jetstream.RetentionPolicy) error {
	js, err := jetstream.New(conn)
	if err != nil {
		return err
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              name,
		Subjects:          []string{target, target + scheduleSubjects + ">"},
		Retention:         retention,
		Storage:           jetstream.FileStorage,
		AllowMsgSchedules: true,
	})
	if err != nil {
		return fmt.Errorf("creating stream %s with message schedules: %w", name, err)
	}
	if !s.CachedInfo().Config.AllowMsgSchedules {
		return fmt.Errorf("NATS server %s does not keep message schedules (they need 2.12 or later): stream %s would deliver every message at once",
			conn.ConnectedServerVersion(), name)
	}
	return nil
}

// scheduleMsg is msg as a NATS message for subject, its headers as NATS headers (watermill-nats'
// format, which natstransport reads), and its due time. Without keepExpire the timeout manager's
// due-time header is left out.
func scheduleMsg(subject string, msg *message.Message, keepExpire bool) (*nats.Msg, time.Time, error) {
	due, err := wireparse.ParseExpire(msg.Metadata.Get(wire.HeaderExpire))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("message %s: %w", msg.UUID, err)
	}
	h := nats.Header{wnats.WatermillUUIDHdr: []string{msg.UUID}}
	for k, v := range msg.Metadata {
		if keepExpire || k != wire.HeaderExpire {
			h.Set(k, v)
		}
	}
	return &nats.Msg{Subject: subject, Header: h, Data: msg.Payload}, due, nil
}

// scheduling says how a row writes a message's schedule: the options of its publish, given the
// due time and the target subject.
type scheduling func(due time.Time, target string, m *nats.Msg) []jetstream.PublishOpt

// rawSchedule writes the two headers by hand, the due time to the nanosecond.
func rawSchedule(due time.Time, target string, m *nats.Msg) []jetstream.PublishOpt {
	m.Header.Set(jetstream.ScheduleHeader, "@at "+due.UTC().Format(time.RFC3339Nano))
	m.Header.Set(jetstream.ScheduleTargetHeader, target)
	return nil
}

// withScheduleAt is how nats.go's documentation has users schedule a message; WithScheduleAt
// writes the time without its fraction of a second.
func withScheduleAt(due time.Time, target string, _ *nats.Msg) []jetstream.PublishOpt {
	return []jetstream.PublishOpt{jetstream.WithScheduleAt(due), jetstream.WithScheduleTarget(target)}
}

// publishSchedules publishes msgs as schedules for target, each on a subject of its own,
// asynchronously, and waits for every acknowledgement. A message already due goes straight to
// target, as a schedule in the past is not a delay.
func publishSchedules(ctx context.Context, js jetstream.JetStream, target string, msgs []*message.Message, schedule scheduling) error {
	now := time.Now()
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, msg := range msgs {
		m, due, err := scheduleMsg(scheduleSubject(target, msg.UUID), msg, false)
		if err != nil {
			return err
		}
		var opts []jetstream.PublishOpt
		if due.After(now) {
			opts = schedule(due, target, m)
		} else {
			m.Subject = target
		}
		f, err := js.PublishMsgAsync(m, opts...)
		if err != nil {
			return fmt.Errorf("message %s: %w", msg.UUID, err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("message %s: %w", f.Msg().Header.Get(wnats.WatermillUUIDHdr), err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return fmt.Errorf("message %s: no acknowledgement within 30 s", f.Msg().Header.Get(wnats.WatermillUUIDHdr))
		}
	}
	return nil
}

// natsScheduleSystem is JetStream's message schedules driven by a plain nats.go client: a stream
// of the rig's own holds the destination subject and one schedule subject per message; when due
// the server stores the message on the destination subject, which natstransport consumes as the
// emulated NATS row's receiver does. It is a yardstick, not timeoutmill.
func natsScheduleSystem(name string, schedule scheduling, note string) System {
	return System{
		Name:      name,
		Needs:     []string{"nats"},
		Reference: true,
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			closers := cleanup{func() error { return natsBroker().forget(context.Background(), env, dest) }}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			conn, err := nats.Connect(env.NATSURL, nats.Name("timeoutbench schedules"))
			if err != nil {
				return fail(fmt.Errorf("connecting the plain client: %w", err))
			}
			closers = append(closers, func() error { conn.Close(); return nil })
			if err := createScheduleStream(ctx, conn, natstransport.StreamName(dest), dest, jetstream.LimitsPolicy); err != nil {
				return fail(err)
			}
			js, err := jetstream.New(conn)
			if err != nil {
				return fail(err)
			}
			arrivals, closeReceiver, err := natsReceiver(ctx, env, dest)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, closeReceiver)
			return &Rig{
				Mark: timeouts.DeliverAt,
				Publish: func(topic string, msgs ...*message.Message) error {
					return publishSchedules(ctx, js, topic, msgs, schedule)
				},
				Arrivals: arrivals,
				Close:    closers.run,
				Notes: []string{note, "one schedule subject per message; asynchronous publishes, every acknowledgement awaited per call",
					fmt.Sprintf("receiver: natstransport, %d consumers", streamConsumers)},
			}, nil
		},
	}
}

// natsReceiver consumes dest with natstransport, as the emulated NATS row's application does.
func natsReceiver(ctx context.Context, env Env, dest string) (<-chan *message.Message, func() error, error) {
	_, sub, _, err := natsBroker().open(ctx, env)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting the receiver: %w", err)
	}
	arrivals, err := sub.Subscribe(ctx, dest)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("subscribing to %s: %w", dest, err), sub.Close())
	}
	return arrivals, sub.Close, nil
}

// natsNative is native/nats: the project's publisher of JetStream schedules, on a schedule
// stream of the rig's own that also captures the destination.
func natsNative() System {
	return System{
		Name:  natsNativeName,
		Needs: []string{"nats"},
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			stream := natstransport.StreamName(dest) + "_schedules"
			// dest starts the stream's name, so that forgetting dest deletes it.
			closers := cleanup{func() error { return natsBroker().forget(context.Background(), env, dest) }}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			pub, err := nativenats.NewPublisher(nativenats.Config{
				URL: env.NATSURL, Stream: stream, SubjectPrefix: "timeoutbench." + dest, ConnectionName: "timeoutbench native",
			}, env.logger())
			if err != nil {
				return fail(fmt.Errorf("connecting the native publisher: %w", err))
			}
			closers = append(closers, pub.Close)
			if err := pub.Setup(ctx); err != nil {
				return fail(fmt.Errorf("creating the schedule stream: %w", err))
			}
			// Before the receiver subscribes, which would create a stream of its own for dest.
			if err := pub.EnsureDestinations(ctx, dest); err != nil {
				return fail(fmt.Errorf("adding the destination to the schedule stream: %w", err))
			}
			arrivals, closeReceiver, err := natsReceiver(ctx, env, dest)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, closeReceiver)
			return &Rig{
				Mark:     timeouts.DeliverAt,
				Publish:  pub.Publish,
				Arrivals: arrivals,
				Close:    closers.run,
				Notes: []string{"native/nats with its defaults, a schedule stream of the row's own",
					fmt.Sprintf("receiver: natstransport, %d consumers", streamConsumers)},
			}, nil
		},
	}
}

// natsScheduleSystems are JetStream's own schedules: native/nats, its yardstick, then the trap.
func natsScheduleSystems() []System {
	return []System{
		natsNative(),
		natsScheduleSystem(natsRawSchedulesName, rawSchedule, "Nats-Schedule: @at with the due time to the nanosecond, and Nats-Schedule-Target, written by hand"),
		natsScheduleSystem(natsScheduleAtName, withScheduleAt, "jetstream.WithScheduleAt and WithScheduleTarget, which write the due time in whole seconds"),
	}
}

// natsTargets hold native/nats to its yardstick, the plain client on the same mechanism, and
// set its early arrivals beside those of WithScheduleAt, the trap it saves users from.
func natsTargets(f finder) []Target {
	drain := Target{Goal: "drain NATS native schedules ≥ 0.9× the plain client's raw schedule headers", Met: "—", Measured: notMeasured}
	v, ok1 := f.figure(natsNativeName, KindBacklog, "drain")
	b, ok2 := f.figure(natsRawSchedulesName, KindBacklog, "drain")
	if ok1 && ok2 && b > 0 {
		drain.Measured = fmt.Sprintf("%s/s vs %s/s = %.2f×", rate(v), rate(b), v/b)
		drain.Met = verdict(v >= 0.9*b)
	}
	noEarly := Target{Goal: "NATS native schedules: 0 early, where WithScheduleAt as users call it delivers early", Met: "—", Measured: notMeasured}
	var native, trap []string
	nativeEarly, rows := 0, 0
	for _, k := range []Kind{KindPrecision, KindBacklog} {
		if r, ok := f.get(natsNativeName, k); ok && r.Counted {
			rows++
			nativeEarly += r.Early
			native = append(native, fmt.Sprintf("%s %s of %s", k, count(r.Early), count(r.Messages)))
		}
		if r, ok := f.get(natsScheduleAtName, k); ok && r.Counted {
			trap = append(trap, fmt.Sprintf("%s %s", k, early(r.Early, r.Messages)))
		}
	}
	if rows > 0 {
		noEarly.Met = verdict(nativeEarly == 0)
		noEarly.Measured = "native early: " + strings.Join(native, ", ")
		if len(trap) > 0 {
			noEarly.Measured += "; WithScheduleAt early: " + strings.Join(trap, ", ")
		}
	}
	return []Target{drain, noEarly}
}
