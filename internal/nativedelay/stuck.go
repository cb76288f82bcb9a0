package nativedelay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// StuckWait is how long Verify gives a probe that expires at once at the head of a level's queue
// to come out of the levels. Moving one message on takes the broker milliseconds; the margin is
// for a broker or machine under heavy load, and is only waited out when a level is stuck.
const StuckWait = 15 * time.Second

// maxAheadWait bounds how long Verify waits for the messages ahead of a probe in a level's queue
// to expire: levels whose TTL is longer are watched only when nothing is ahead of their probe.
const maxAheadWait = 8 * time.Second

// maxMovingWait bounds how long Verify keeps waiting for the probe of a level whose queue is
// moving (see watch): thousands of messages that expire together ahead of a probe take the
// broker's dead-lettering that long on a loaded machine.
const maxMovingWait = 2 * time.Minute

// watch is what Verify knows of a level whose probe it waits for.
type watch struct {
	deadline time.Time // when the probe is late
	messages int       // in the level's queue when the deadline was set
	until    time.Time // the latest deadline a moving queue gets
}

// late decides, at a deadline the probe missed, with messages now in the level's queue, whether
// the level is stuck. A queue holding fewer messages than when the deadline was set passed some
// on: it moves, slowly, and gets another StuckWait, up to maxMovingWait in all. A stuck level's
// queue holds its head and everything behind it, so it never gets fewer.
func (w *watch) late(now time.Time, messages int) (stuck bool) {
	if messages >= w.messages || !now.Before(w.until) {
		return true
	}
	w.messages = messages
	w.deadline = now.Add(StuckWait)
	if w.deadline.After(w.until) {
		w.deadline = w.until
	}
	return false
}

// stuckHeader carries the run and level of a probe that watches a level move.
const stuckHeader = "timeoutmill-probe-level"

// stuck watches each level pass a message on: a probe with a TTL of 0 for the probe queue goes
// into the queue of each level, expires as soon as it is at the head, and the broker's
// dead-lettering carries it down to the probe queue; a queue of Verify's own, bound like the
// probe queue (to via) while it runs, sees it arrive. A level whose probe does not arrive within
// StuckWait of its expiry holds it behind messages the dead-lettering does not move on: it is
// stuck, unless its queue passed other messages on meanwhile (see watch.late).
//
// A probe is only conclusive when Verify knows when it reaches the head: when nothing waits ahead
// of it, or what waits expires within maxAheadWait. The others come out later and end in the
// probe queue, which drops them, as every probe does after Verify.
func (v *verifier) stuck(ctx context.Context, p *prober, via string) error {
	t := v.t
	ch, err := v.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: opening a channel to watch the levels: %w", err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: declaring a queue to watch the levels: %w", err)
	}
	if err := ch.QueueBind(q.Name, DestinationBindingKey(t.ProbeQueue()), via, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: binding a queue to watch the levels: %w", err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: watching the levels: %w", err)
	}

	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	run := hex.EncodeToString(r[:])
	out := make([]Outgoing, Levels)
	for level := range Levels {
		key, err := RoutingKey(1<<level, t.ProbeQueue())
		if err != nil {
			return err
		}
		out[level] = Outgoing{Exchange: t.Exchange(level), Key: key, Msg: amqp.Publishing{
			MessageId:  probeHeader,
			Expiration: "0",
			Headers:    amqp.Table{probeHeader: true, stuckHeader: run + "/" + strconv.Itoa(level)},
		}}
	}
	results, err := p.s.Send(ctx, out)
	if err != nil {
		return fmt.Errorf("rabbitmq: probing the levels: %w", err)
	}
	sent := time.Now()
	count := func(level int) (int, error) {
		var messages int
		err := OnChannel(v.conn, func(ch *amqp.Channel) error {
			q, err := ch.QueueDeclarePassive(t.Queue(level), true, false, false, false, nil)
			messages = q.Messages
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("rabbitmq: counting the messages of queue %s: %w", t.Queue(level), err)
		}
		return messages, nil
	}
	deadlines := map[int]*watch{}
	for level, rerr := range results {
		if rerr != nil {
			return fmt.Errorf("rabbitmq: probing level %d: %w", level, rerr)
		}
		messages, err := count(level)
		if err != nil {
			return err
		}
		ahead := messages - 1 // the probe itself, unless it has gone already
		ttl := time.Duration(TTLMillis(level)) * time.Millisecond
		switch {
		case ahead <= 0:
			deadlines[level] = &watch{deadline: sent.Add(StuckWait), messages: messages, until: sent.Add(maxMovingWait)}
		case ttl <= maxAheadWait:
			deadlines[level] = &watch{deadline: sent.Add(ttl + StuckWait), messages: messages, until: sent.Add(ttl + maxMovingWait)}
		}
	}

	arrived := func(d amqp.Delivery) {
		mark, _ := d.Headers[stuckHeader].(string)
		if got, level, ok := strings.Cut(mark, "/"); ok && got == run {
			if l, err := strconv.Atoi(level); err == nil {
				delete(deadlines, l)
			}
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for len(deadlines) > 0 {
		next := time.Time{}
		for _, w := range deadlines {
			if next.IsZero() || w.deadline.Before(next) {
				next = w.deadline
			}
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("rabbitmq: the queue watching the levels was closed: %w", amqp.ErrClosed)
			}
			arrived(d)
		case now := <-timer.C:
			// What arrived while Verify was busy counting is not late: take it first.
			for drained := false; !drained; {
				select {
				case d, ok := <-deliveries:
					if !ok {
						return fmt.Errorf("rabbitmq: the queue watching the levels was closed: %w", amqp.ErrClosed)
					}
					arrived(d)
				default:
					drained = true
				}
			}
			for level := range Levels {
				w, ok := deadlines[level]
				if !ok || w.deadline.After(now) {
					continue
				}
				messages, err := count(level)
				if err != nil {
					return err
				}
				if !w.late(now, messages) {
					continue // moving: fewer messages than at the last deadline
				}
				v.problem("queue "+t.Queue(level), "is stuck: it passes nothing on (a probe that expired at the head of the queue did not come out of the levels within %s, and the queue passed nothing else on meanwhile). "+
					"Without the guard, a message whose destination queue was deleted while it waited in this level is held there by the broker, retried every few minutes, "+
					"and once 32 are held every message behind them waits: re-create the missing queue and bind it with `timeoutmill native setup --destination QUEUE`, "+
					"and what was held arrives in minutes (see docs/operations.md, \"Native delay: unroutable messages\")", StuckWait)
				delete(deadlines, level)
			}
		}
	}
	return nil
}
