package nativedelay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrTopology is wrapped by a *VerifyError: the delay infrastructure is missing or wrong.
var ErrTopology = errors.New("rabbitmq: the delay infrastructure is missing or wrong")

// Problem is one missing or wrong piece of the delay infrastructure.
type Problem struct {
	// Piece names it: "queue timeoutmill.delay-level-03", "binding of ...".
	Piece string
	// Wrong says what is wrong: "is missing", or the broker's words for a difference.
	Wrong string
}

func (p Problem) String() string { return p.Piece + " " + p.Wrong }

// VerifyError lists every problem Verify found.
type VerifyError struct {
	Problems []Problem
}

func (e *VerifyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the delay infrastructure is missing or wrong (%d problem(s); `timeoutmill native setup` declares missing pieces):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

func (e *VerifyError) Unwrap() error { return ErrTopology }

// Verify checks the delay infrastructure on conn without changing it, and returns nil when every
// exchange, queue, queue argument (TTL, dead-letter exchange, queue type, dead-letter strategy)
// and binding is as Setup declares it, a *VerifyError listing each problem otherwise, or another
// error when it could not check.
//
// Exchanges and queues are checked by a passive declaration (does it exist?) and then by
// declaring them again exactly as Setup does, which the broker refuses with PRECONDITION_FAILED,
// naming the argument, when anything differs; a declaration that matches changes nothing.
//
// AMQP 0-9-1 cannot list bindings, so each binding is checked by routing: a probe message is
// published, mandatory and with publisher confirms, with a routing key only that binding
// routes; the broker returns it when the binding is missing. A probe that reaches a level queue
// carries a TTL of 0, so it leaves the queue as soon as it is at its head and follows the levels
// down to the probe queue, which drops it. Bindings Verify cannot see: extra ones (a queue bound
// with "#" as well), and destinations' bindings to the delivery exchange, which a probe could
// only check by delivering to the destination; the Publisher binds a destination before its
// first message to it instead.
//
// The guard (DestinationsExchange with its alternate exchange, UnroutableExchange and
// UnroutableQueue) is checked like the rest: an earlier setup lacks it, and Verify says what that
// risks. Messages waiting in UnroutableQueue are a problem too: someone has to replay them. The
// binding of UnroutableQueue to its exchange is not probed: a probe would stay in the queue.
//
// Last, Verify watches every level pass a message on (see StuckWait): a level whose
// dead-lettering is stuck, held by messages it cannot deliver, is a problem naming the level.
//
// NServiceBus's destination binding "#.<queue>", which earlier versions declared and which also
// catches messages for queues whose names end in ".<queue>", is reported where Verify can see it:
// on the probe queue, as the mark of an earlier setup (see DestinationBindingKey).
func (t Topology) Verify(ctx context.Context, conn *amqp.Connection) error {
	v := verifier{t: t, conn: conn}
	if err := v.run(ctx); err != nil {
		return err
	}
	if len(v.problems) > 0 {
		return &VerifyError{Problems: v.problems}
	}
	return nil
}

type verifier struct {
	t        Topology
	conn     *amqp.Connection
	problems []Problem
}

func (v *verifier) problem(piece, format string, args ...any) {
	v.problems = append(v.problems, Problem{Piece: piece, Wrong: fmt.Sprintf(format, args...)})
}

func (v *verifier) run(ctx context.Context) error {
	t := v.t
	// present holds each piece found right: "exchange X", "queue X", and each binding whose
	// probe routed. A probe is only sent when what it passes through is present.
	present := map[string]bool{}
	var err error
	if present["exchange "+t.DeliveryExchange()], err = v.exchange(ctx, t.DeliveryExchange()); err != nil {
		return err
	}
	if err := v.guard(ctx, present); err != nil {
		return err
	}
	for level := Levels - 1; level >= 0; level-- {
		if present["exchange "+t.Exchange(level)], err = v.exchange(ctx, t.Exchange(level)); err != nil {
			return err
		}
		if present["queue "+t.Queue(level)], err = v.levelQueue(ctx, level); err != nil {
			return err
		}
	}
	if present["queue "+t.ProbeQueue()], err = v.queue(ctx, t.ProbeQueue(), probeQueueArguments()); err != nil {
		return err
	}

	p, err := newProber(v.conn)
	if err != nil {
		return err
	}
	defer p.close()
	check := func(piece, exchange, key string, needs ...string) error {
		for _, n := range needs {
			if !present[n] {
				return nil // what it needs is reported missing or wrong already
			}
		}
		routed, err := p.routes(ctx, exchange, key)
		if err != nil {
			return fmt.Errorf("rabbitmq: checking the %s: %w", piece, err)
		}
		if routed {
			present[piece] = true
		} else {
			v.problem(piece, "is missing (a probe with routing key %s was returned unroutable)", key)
		}
		return nil
	}

	probeKey := func(seconds uint32) string {
		key, _ := RoutingKey(seconds, t.ProbeQueue()) // the prefix was validated: cannot fail
		return key
	}
	// The probe queue is bound like a destination: to the guard, and the guard to the delivery
	// exchange. Without the guard (an earlier setup), it is bound straight to the delivery
	// exchange, which is reported above; the levels are checked through that binding then.
	probeKeyBinding := DestinationBindingKey(t.ProbeQueue())
	probeBinding := bindingName("queue", t.ProbeQueue(), t.DeliveryExchange(), probeKeyBinding)
	if present["exchange "+t.DestinationsExchange()] {
		viaGuard := bindingName("queue", t.ProbeQueue(), t.DestinationsExchange(), probeKeyBinding)
		if err := check(viaGuard, t.DestinationsExchange(), probeKey(0), "queue "+t.ProbeQueue()); err != nil {
			return err
		}
		probeBinding = bindingName("exchange", t.DestinationsExchange(), t.DeliveryExchange(), probeKeyBinding)
		if err := check(probeBinding, t.DeliveryExchange(), probeKey(0), "exchange "+t.DeliveryExchange(), viaGuard); err != nil {
			return err
		}
	} else if err := check(probeBinding, t.DeliveryExchange(), probeKey(0), "exchange "+t.DeliveryExchange(), "queue "+t.ProbeQueue()); err != nil {
		return err
	}
	if present[probeBinding] {
		if err := v.legacyProbeBinding(ctx, p); err != nil {
			return err
		}
	}
	deliveryBinding := bindingName("exchange", t.DeliveryExchange(), t.Exchange(0), NextBindingKey(0))
	if err := check(deliveryBinding, t.Exchange(0), probeKey(0), "exchange "+t.Exchange(0), probeBinding); err != nil {
		return err
	}
	levelsRoute := present[deliveryBinding]
	for level := 0; level < Levels; level++ {
		queueBinding := bindingName("queue", t.Queue(level), t.Exchange(level), QueueBindingKey(level))
		if err := check(queueBinding, t.Exchange(level), probeKey(1<<level), "exchange "+t.Exchange(level), "queue "+t.Queue(level)); err != nil {
			return err
		}
		if level == 0 {
			continue
		}
		// The bit of level is 0 and the bit below is 1: only the binding to the exchange below
		// routes it, into the queue of that level, whose binding was checked just before.
		below := bindingName("queue", t.Queue(level-1), t.Exchange(level-1), QueueBindingKey(level-1))
		nextBinding := bindingName("exchange", t.Exchange(level-1), t.Exchange(level), NextBindingKey(level))
		if err := check(nextBinding, t.Exchange(level), probeKey(1<<(level-1)), "exchange "+t.Exchange(level), "exchange "+t.Exchange(level-1), below); err != nil {
			return err
		}
	}
	for level := 0; level < Levels; level++ {
		queueBinding := bindingName("queue", t.Queue(level), t.Exchange(level), QueueBindingKey(level))
		levelsRoute = levelsRoute && present[queueBinding]
	}
	if !levelsRoute {
		return nil // a level cannot be watched moving until every piece of the path is there
	}
	via := t.DeliveryExchange()
	if present["exchange "+t.DestinationsExchange()] {
		via = t.DestinationsExchange()
	}
	return v.stuck(ctx, p, via)
}

// guard checks the guard: the destinations exchange with its alternate exchange, the unroutable
// exchange and queue, and reports the messages waiting in that queue.
func (v *verifier) guard(ctx context.Context, present map[string]bool) error {
	t := v.t
	const why = " (the guard: without it, a message whose destination queue was deleted while it was delayed stays in its quorum delay level, " +
		"retried every few minutes, and 32 such messages stop the level for every destination; `timeoutmill native setup` adds it)"
	before := len(v.problems)
	var err error
	if present["exchange "+t.UnroutableExchange()], err = v.declared(ctx, "exchange "+t.UnroutableExchange(),
		func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(t.UnroutableExchange(), amqp.ExchangeFanout, true, false, false, false, nil)
		},
		func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(t.UnroutableExchange(), amqp.ExchangeFanout, true, false, false, false, nil)
		}); err != nil {
		return err
	}
	if present["queue "+t.UnroutableQueue()], err = v.queue(ctx, t.UnroutableQueue(), t.unroutableQueueArguments()); err != nil {
		return err
	}
	// The broker compares an exchange's alternate exchange when it is declared again: a
	// destinations exchange without one, or with another, differs.
	if present["exchange "+t.DestinationsExchange()], err = v.declared(ctx, "exchange "+t.DestinationsExchange(),
		func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(t.DestinationsExchange(), amqp.ExchangeTopic, true, false, false, false, nil)
		},
		func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(t.DestinationsExchange(), amqp.ExchangeTopic, true, false, false, false, t.destinationsArguments())
		}); err != nil {
		return err
	}
	for i := before; i < len(v.problems); i++ {
		v.problems[i].Wrong += why
	}
	if !present["queue "+t.UnroutableQueue()] {
		return nil
	}
	var waiting int
	err = OnChannel(v.conn, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(t.UnroutableQueue(), true, false, false, false, nil)
		waiting = q.Messages
		return err
	})
	if err != nil {
		return fmt.Errorf("rabbitmq: counting the messages of queue %s: %w", t.UnroutableQueue(), err)
	}
	if waiting > 0 {
		v.problem("queue "+t.UnroutableQueue(), "holds %d message(s) whose destination queue was gone when they fell due: "+
			"`timeoutmill native unroutable list` names their destinations, `timeoutmill native unroutable replay` delivers them once the queues are back", waiting)
	}
	return nil
}

// legacyProbeBinding reports the probe queue's binding "#.<probe queue>", which Setup declared
// before it bound destinations with DestinationBindingKey: a sign that the infrastructure was set
// up by an earlier version, whose Publishers bound every destination queue that way too. A probe
// whose destination is "#.<probe queue>" (a word "#" no destination may have) reaches the probe
// queue only through such a binding.
func (v *verifier) legacyProbeBinding(ctx context.Context, p *prober) error {
	t := v.t
	key := strings.Repeat("0.", Levels) + "#." + t.ProbeQueue()
	if len(key) > maxRoutingKey {
		return nil // a prefix this long cannot be checked this way
	}
	routed, err := p.routes(ctx, t.DeliveryExchange(), key)
	if err != nil {
		return fmt.Errorf("rabbitmq: checking for the legacy binding of %s: %w", t.ProbeQueue(), err)
	}
	if routed {
		v.problem(bindingName("queue", t.ProbeQueue(), t.DeliveryExchange(), LegacyDestinationBindingKey(t.ProbeQueue())),
			"is the legacy binding of an earlier setup, which also catches messages for queues whose names end in \".<queue>\"; "+
				"`timeoutmill native setup` replaces it, and `timeoutmill native setup --destination Q` (or an upgraded Publisher's first message) each destination's")
	}
	return nil
}

func bindingName(kind, destination, source, key string) string {
	return fmt.Sprintf("binding of %s %s to exchange %s on %s", kind, destination, source, key)
}

// exchange reports whether the exchange exists, and a problem if it is missing or differs.
func (v *verifier) exchange(ctx context.Context, name string) (bool, error) {
	return v.declared(ctx, "exchange "+name,
		func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(name, amqp.ExchangeTopic, true, false, false, false, nil)
		},
		func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil)
		})
}

// queue reports whether the queue exists, and a problem if it is missing or differs.
func (v *verifier) queue(ctx context.Context, name string, args amqp.Table) (bool, error) {
	return v.declared(ctx, "queue "+name,
		func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			return err
		},
		func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(name, true, false, false, false, args)
			return err
		})
}

// levelQueue is queue for the queue of a level, and tells a queue of the other type apart from
// one whose arguments differ otherwise (the broker names only the first argument that differs).
func (v *verifier) levelQueue(ctx context.Context, level int) (bool, error) {
	t := v.t
	before := len(v.problems)
	exists, err := v.queue(ctx, t.Queue(level), t.QueueArguments(level))
	if err != nil || len(v.problems) == before || !exists {
		return exists, err
	}
	other := Topology{prefix: t.prefix, queueType: Quorum}
	if t.queueType == Quorum {
		other.queueType = Classic
	}
	err = OnChannel(v.conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(t.Queue(level), true, false, false, false, other.QueueArguments(level))
		return err
	})
	if err == nil {
		v.problems[before].Wrong = fmt.Sprintf("is a %s queue, not %s (set up with the other queue type?)", other.queueType, t.queueType)
	}
	return true, nil
}

// declared runs a passive declaration, then, when the piece exists, the full one; each on a
// channel of its own, as a refused declaration closes its channel.
func (v *verifier) declared(ctx context.Context, piece string, passive, full func(ch *amqp.Channel) error) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	err := OnChannel(v.conn, passive)
	switch code := AMQPCode(err); {
	case err == nil:
	case code == amqp.NotFound:
		v.problem(piece, "is missing")
		return false, nil
	default:
		return false, fmt.Errorf("rabbitmq: checking %s: %w", piece, err)
	}
	err = OnChannel(v.conn, full)
	switch code := AMQPCode(err); {
	case err == nil:
	case code == amqp.PreconditionFailed:
		v.problem(piece, "differs: %s", Reason(err))
	default:
		return true, fmt.Errorf("rabbitmq: checking %s: %w", piece, err)
	}
	return true, nil
}

// AMQPCode is the AMQP reply code of err, or 0.
func AMQPCode(err error) int {
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) {
		return amqpErr.Code
	}
	return 0
}

// Reason is the broker's text of an AMQP error, without the code name it starts with.
func Reason(err error) string {
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) {
		return err.Error()
	}
	_, text, ok := strings.Cut(amqpErr.Reason, " - ")
	if !ok {
		return amqpErr.Reason
	}
	return text
}
