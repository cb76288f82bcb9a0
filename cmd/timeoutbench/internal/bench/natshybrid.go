package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/natstransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// natsHybridName names the rows of the hybrid prototype.
const natsHybridName = "NATS schedules, then PostgreSQL for the last second (hybrid prototype)"

// hybridLead is how long before its due time the hybrid's NATS schedule hands a message to the
// emulated pipeline: more than the server's scheduler lags (its timer runs at most every 250 ms),
// so that the store holds the message before it is due.
const hybridLead = time.Second

// hybridPublisher is what the timeout manager's Publisher publishes through in the hybrid: a
// delayed message bound for the Timeouts queue becomes a JetStream schedule that stores it in that
// queue hybridLead before it is due, so that NATS holds the bulk of the delay and the store and
// poller only its last second; a message due sooner goes to the queue at once. Anything else
// passes through.
type hybridPublisher struct {
	ctx      context.Context
	next     message.Publisher
	js       jetstream.JetStream
	timeouts string
}

func (p hybridPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic != p.timeouts {
		return p.next.Publish(topic, msgs...)
	}
	now := time.Now()
	var soon []*message.Message
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, msg := range msgs {
		m, due, err := scheduleMsg(scheduleSubject(p.timeouts, msg.UUID), msg, true)
		if err != nil {
			return err
		}
		fire := due.Add(-hybridLead)
		if !fire.After(now) {
			soon = append(soon, msg)
			continue
		}
		rawSchedule(fire, p.timeouts, m)
		m.Header.Set(hybridScheduledHeader, m.Subject)
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("message %s: %w", msg.UUID, err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("scheduling %s: %w", f.Msg().Subject, err)
		case <-p.ctx.Done():
			return p.ctx.Err()
		case <-time.After(30 * time.Second):
			return fmt.Errorf("scheduling %s: no acknowledgement within 30 s", f.Msg().Subject)
		}
	}
	if len(soon) > 0 {
		return p.next.Publish(p.timeouts, soon...)
	}
	return nil
}

func (p hybridPublisher) Close() error { return nil }

// natsHybrid is the emulated pipeline on NATS with the PostgreSQL store, its Timeouts queue a
// stream that also keeps JetStream schedules: each delayed message waits in NATS until
// hybridLead before due, then in the store for its last second, delivered by the poller. A
// prototype measured beside the native and the emulated rows, not a product.
func natsHybrid() System {
	emulated := streamSystem(natsBroker())
	return System{
		Name:  natsHybridName,
		Needs: emulated.Needs,
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			endpoint := endpointName()
			timeoutsQueue := wire.TimeoutsQueue(endpoint)
			conn, err := nats.Connect(env.NATSURL, nats.Name("timeoutbench hybrid schedules"))
			if err != nil {
				return nil, fmt.Errorf("connecting the scheduling client: %w", err)
			}
			closers := cleanup{func() error { conn.Close(); return nil }}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			// The Timeouts queue's stream, created before the pipeline declares it (which leaves a
			// stream that captures the queue as it is): work-queue retention, as natstransport's.
			if err := createScheduleStream(ctx, conn, natstransport.StreamName(timeoutsQueue), timeoutsQueue, jetstream.WorkQueuePolicy); err != nil {
				return fail(err)
			}
			closers = append(closers, func() error { return natsBroker().forget(context.Background(), env, endpoint) })
			js, err := jetstream.New(conn)
			if err != nil {
				return fail(err)
			}
			rig, err := openStreamPipeline(ctx, env, natsBroker(), endpoint, dest)
			if err != nil {
				return fail(err)
			}
			pub, err := timeouts.NewPublisher(hybridPublisher{ctx: ctx, next: rig.next, js: js, timeouts: timeoutsQueue}, endpoint)
			if err != nil {
				return fail(errors.Join(err, rig.Close()))
			}
			closers = append(closers, rig.Close)
			rig.Publish = pub.Publish
			rig.Pending = nil // the store holds only the last second; NATS the rest
			rig.Close = closers.run
			rig.Notes = append(rig.Notes, fmt.Sprintf("each delayed message a NATS schedule (@at to the nanosecond) into the Timeouts queue %s before due, then stored and delivered by the poller", hybridLead))
			return &rig.Rig, nil
		},
	}
}

// hybridScheduledHeader names, on a message the hybrid handed to a NATS schedule, that schedule's
// subject: what went through a schedule can be told from what did not. The server's own schedule
// headers (Nats-Scheduler, ...) do not reach the pipeline: natstransport's Subscriber leaves them
// out, so the store forwards the message to streams without schedules.
const hybridScheduledHeader = "timeoutbench.scheduler"
