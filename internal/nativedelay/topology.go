package nativedelay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
)

// QueueType is the kind of queue each delay level uses.
type QueueType string

const (
	// Quorum queues replicate and, with at-least-once dead-lettering, hand an expired message to
	// the next level with publisher confirms: a message is never lost between levels (RabbitMQ
	// 3.10 or later). The default.
	Quorum QueueType = "quorum"
	// Classic durable queues dead-letter at most once: a message can be lost between levels if
	// the broker stops at that moment. For brokers older than 3.10.
	Classic QueueType = "classic"
)

// DefaultPrefix starts the names of the delay infrastructure.
const DefaultPrefix = "timeoutmill"

// probeQueueSuffix ends the probe queue's name.
const probeQueueSuffix = ".delay-probes"

// Suffixes of the guard's names: the exchange destinations are bound to, and the exchange and
// queue of what it cannot route.
const (
	destinationsSuffix = ".delay-destinations"
	unroutableSuffix   = ".delay-unroutable"
)

// maxPrefix is the longest prefix whose probe queue can still end a routing key, as verify's
// probes route to it: the tightest of the names the prefix starts (the level and delivery names
// take at most 15 more bytes of an AMQP name's 255).
const maxPrefix = MaxDestinationLength - len(probeQueueSuffix)

// Topology names the delay infrastructure and says which queues it uses:
//
//	<prefix>.delay-level-27 ... <prefix>.delay-level-00   a topic exchange and a queue each
//	<prefix>.delay-delivery                               the topic exchange level 0 ends in
//	<prefix>.delay-destinations                           the topic exchange destinations bind to,
//	                                                      with the alternate exchange:
//	<prefix>.delay-unroutable                             a fanout exchange and a queue: messages
//	                                                      whose destination queue is gone
//	<prefix>.delay-probes                                 where verify's probe messages end
//
// The zero value is not usable; NewTopology fills in the defaults.
type Topology struct {
	prefix    string
	queueType QueueType
}

// NewTopology returns the topology with names starting with prefix ("" means DefaultPrefix) and
// queues of queueType ("" means Quorum).
func NewTopology(prefix string, queueType QueueType) (Topology, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if queueType == "" {
		queueType = Quorum
	}
	switch {
	case len(prefix) > maxPrefix:
		return Topology{}, fmt.Errorf("%w: prefix %q is longer than %d bytes", configerr.ErrInvalidConfig, prefix, maxPrefix)
	case strings.ContainsAny(prefix, "*# \t\r\n"):
		return Topology{}, fmt.Errorf("%w: prefix %q must not contain whitespace, '*' or '#'", configerr.ErrInvalidConfig, prefix)
	case strings.HasPrefix(prefix, "amq."):
		return Topology{}, fmt.Errorf("%w: prefix %q: names starting with amq. are reserved by the broker", configerr.ErrInvalidConfig, prefix)
	case queueType != Quorum && queueType != Classic:
		return Topology{}, fmt.Errorf("%w: queue type %q: expected %q or %q", configerr.ErrInvalidConfig, queueType, Quorum, Classic)
	}
	return Topology{prefix: prefix, queueType: queueType}, nil
}

// Prefix starts every name of the topology.
func (t Topology) Prefix() string { return t.prefix }

// QueueType is the kind of the level queues.
func (t Topology) QueueType() QueueType { return t.queueType }

// Exchange names the topic exchange of a delay level (0..27).
func (t Topology) Exchange(level int) string {
	return fmt.Sprintf("%s.delay-level-%02d", t.prefix, level)
}

// Queue names the queue of a delay level (0..27); it has the name of the level's exchange.
func (t Topology) Queue(level int) string { return t.Exchange(level) }

// DeliveryExchange names the topic exchange that level 0 ends in, and that messages without a
// delay are published to. For each destination, it is bound to DestinationsExchange.
func (t Topology) DeliveryExchange() string { return t.prefix + ".delay-delivery" }

// DestinationsExchange names the topic exchange destination queues are bound to: the guard. The
// delivery exchange passes it the messages of each destination bound through it; what it cannot
// route, because the destination's queue was deleted, it sends to its alternate exchange,
// UnroutableExchange, instead of leaving it to the level it comes from.
//
// Why not the delivery exchange's own alternate exchange: an exchange's arguments cannot change
// once it is declared, and the delivery exchange of an earlier setup has none. Binding the
// delivery exchange to this one destination by destination (never on "#") adds the guard to
// such a setup without a copy of any message going astray: a destination still bound straight
// to the delivery exchange, as earlier versions bound it, is not bound through the guard, so
// the guard never sees its messages.
func (t Topology) DestinationsExchange() string { return t.prefix + destinationsSuffix }

// UnroutableExchange names the fanout exchange that DestinationsExchange sends what it cannot
// route to; it routes everything to UnroutableQueue.
func (t Topology) UnroutableExchange() string { return t.prefix + unroutableSuffix }

// UnroutableQueue names the queue where a message waits whose destination queue was deleted
// while it was delayed, with its routing key (its delay bits and its destination) and headers
// as they were. `timeoutmill native unroutable list` shows them, `... replay` delivers them.
func (t Topology) UnroutableQueue() string { return t.UnroutableExchange() }

// destinationsArguments are the arguments of DestinationsExchange: its alternate exchange.
func (t Topology) destinationsArguments() amqp.Table {
	return amqp.Table{"alternate-exchange": t.UnroutableExchange()}
}

// unroutableQueueArguments are those of UnroutableQueue: of the topology's queue type, so that
// a quorum topology keeps what it could not deliver replicated too.
func (t Topology) unroutableQueueArguments() amqp.Table {
	return amqp.Table{"x-queue-type": string(t.queueType)}
}

// ProbeQueue names the queue that verify's probe messages end in. It keeps nothing: it is
// limited to zero messages.
func (t Topology) ProbeQueue() string { return t.prefix + probeQueueSuffix }

// TTLMillis is the time a message spends in the queue of level: 2^level seconds.
func TTLMillis(level int) int64 { return int64(1000) << level }

// deadLetterExchange is where the queue of level sends expired messages: the level below, or
// the delivery exchange for level 0.
func (t Topology) deadLetterExchange(level int) string {
	if level == 0 {
		return t.DeliveryExchange()
	}
	return t.Exchange(level - 1)
}

// QueueArguments are the arguments the queue of level is declared with.
func (t Topology) QueueArguments(level int) amqp.Table {
	args := amqp.Table{
		"x-queue-type":           string(t.queueType),
		"x-message-ttl":          TTLMillis(level),
		"x-dead-letter-exchange": t.deadLetterExchange(level),
	}
	if t.queueType == Quorum {
		// At-least-once dead-lettering needs reject-publish: RabbitMQ falls back to at most once
		// with the default drop-head.
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	return args
}

// probeQueueArguments make the probe queue drop every message it gets: a probe only has to
// arrive somewhere, and a quorum level queue dead-lettering at least once would keep retrying a
// probe that arrives nowhere.
func probeQueueArguments() amqp.Table {
	return amqp.Table{"x-queue-type": string(Classic), "x-max-length": int64(0)}
}

// QueueBindingKey binds the queue of level to its exchange: the level's bit is 1.
func QueueBindingKey(level int) string { return strings.Repeat("*.", Levels-1-level) + "1.#" }

// NextBindingKey binds the exchange below level (or the delivery exchange, below level 0) to the
// exchange of level: the level's bit is 0.
func NextBindingKey(level int) string { return strings.Repeat("*.", Levels-1-level) + "0.#" }

// DestinationBindingKey binds a destination queue to the delivery exchange: 28 single-word
// wildcards, one for each delay bit every routing key starts with, then the queue's name
// ("*.*. … *.orders"). It matches the keys of messages for exactly that destination.
//
// NServiceBus binds "#." and the queue's name instead, which also matches every destination that
// ends in "." and that name: its queue "orders" also receives what is delayed for
// "billing.orders". LegacyDestinationBindingKey is that binding; Setup and the Publisher remove it
// where they bind.
func DestinationBindingKey(destination string) string {
	return strings.Repeat("*.", Levels) + destination
}

// LegacyDestinationBindingKey is the binding of a destination queue to the delivery exchange as
// NServiceBus, and timeoutmill before it was fixed, declare it: "#." and the queue's name. It
// catches messages for destinations ending in "." and that name as well, so Setup and the
// Publisher replace it with DestinationBindingKey, and Verify reports it where it can see it.
func LegacyDestinationBindingKey(destination string) string { return "#." + destination }

// BindDestination binds queue through the guard on ch: the queue to DestinationsExchange and
// DestinationsExchange to the delivery exchange, each on DestinationBindingKey; then it removes
// the queue's bindings straight to the delivery exchange that earlier versions declared (on
// that key, and the legacy "#.<queue>"). In this order the queue is never without a binding;
// while both paths exist, the broker delivers a message that matches both once.
//
// The binding of the delivery exchange to the guard stays when the queue is deleted (the
// broker removes only the queue's own bindings): that is what sends the messages still delayed
// for it to UnroutableQueue.
func (t Topology) BindDestination(ch *amqp.Channel, queue string) error {
	key := DestinationBindingKey(queue)
	if err := ch.QueueBind(queue, key, t.DestinationsExchange(), false, nil); err != nil {
		return err
	}
	if err := ch.ExchangeBind(t.DestinationsExchange(), key, t.DeliveryExchange(), false, nil); err != nil {
		return err
	}
	// Removing a binding that does not exist succeeds.
	for _, old := range []string{key, LegacyDestinationBindingKey(queue)} {
		if err := ch.QueueUnbind(queue, old, t.DeliveryExchange(), nil); err != nil {
			return fmt.Errorf("removing the binding of an earlier version on %s: %w", old, err)
		}
	}
	return nil
}

// Setup declares the delay infrastructure on conn: every exchange, queue and binding. It is
// idempotent. A queue that exists with other arguments (another TTL, another queue type) makes it
// fail with the broker's PRECONDITION_FAILED, naming the queue; Verify lists every such
// difference.
//
// On infrastructure an earlier version set up, it adds the guard (new exchanges and a queue: the
// ones there are not declared again differently) and moves the probe queue's binding through it;
// each destination moves through it with BindDestinations or a Publisher's first message to it.
func (t Topology) Setup(ctx context.Context, conn *amqp.Connection) error {
	return OnChannel(conn, func(ch *amqp.Channel) error {
		step := func(what string, do func() error) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := do(); err != nil {
				return fmt.Errorf("rabbitmq: %s: %w", what, err)
			}
			return nil
		}
		declareExchange := func(name string) error {
			return step("declaring exchange "+name, func() error {
				return ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil)
			})
		}
		// The guard first, so that no destination is ever bound through an exchange that cannot
		// send what it does not route somewhere.
		if err := step("declaring exchange "+t.UnroutableExchange(), func() error {
			return ch.ExchangeDeclare(t.UnroutableExchange(), amqp.ExchangeFanout, true, false, false, false, nil)
		}); err != nil {
			return err
		}
		if err := step("declaring queue "+t.UnroutableQueue(), func() error {
			_, err := ch.QueueDeclare(t.UnroutableQueue(), true, false, false, false, t.unroutableQueueArguments())
			return err
		}); err != nil {
			return err
		}
		if err := step("binding queue "+t.UnroutableQueue(), func() error {
			return ch.QueueBind(t.UnroutableQueue(), "", t.UnroutableExchange(), false, nil)
		}); err != nil {
			return err
		}
		if err := step("declaring exchange "+t.DestinationsExchange(), func() error {
			return ch.ExchangeDeclare(t.DestinationsExchange(), amqp.ExchangeTopic, true, false, false, false, t.destinationsArguments())
		}); err != nil {
			return err
		}
		if err := declareExchange(t.DeliveryExchange()); err != nil {
			return err
		}
		for level := 0; level < Levels; level++ {
			if err := declareExchange(t.Exchange(level)); err != nil {
				return err
			}
			if err := step("declaring queue "+t.Queue(level), func() error {
				_, err := ch.QueueDeclare(t.Queue(level), true, false, false, false, t.QueueArguments(level))
				return err
			}); err != nil {
				return err
			}
			if err := step("binding queue "+t.Queue(level), func() error {
				return ch.QueueBind(t.Queue(level), QueueBindingKey(level), t.Exchange(level), false, nil)
			}); err != nil {
				return err
			}
			if err := step("binding exchange "+t.deadLetterExchange(level)+" to "+t.Exchange(level), func() error {
				return ch.ExchangeBind(t.deadLetterExchange(level), NextBindingKey(level), t.Exchange(level), false, nil)
			}); err != nil {
				return err
			}
		}
		if err := step("declaring queue "+t.ProbeQueue(), func() error {
			_, err := ch.QueueDeclare(t.ProbeQueue(), true, false, false, false, probeQueueArguments())
			return err
		}); err != nil {
			return err
		}
		return step("binding queue "+t.ProbeQueue(), func() error {
			return t.BindDestination(ch, t.ProbeQueue())
		})
	})
}

// BindDestinations binds each destination queue to the delivery exchange, as the Publisher does
// before its first message to it, and removes the legacy binding "#.<queue>" that NServiceBus and
// earlier versions of this package declared (see DestinationBindingKey). The queues must exist.
// `timeoutmill native setup --destination Q` runs it for queues no upgraded Publisher has sent to
// yet.
func (t Topology) BindDestinations(ctx context.Context, conn *amqp.Connection, destinations ...string) error {
	for _, d := range destinations {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := ValidateDestination(d); err != nil {
			return err
		}
		err := OnChannel(conn, func(ch *amqp.Channel) error { return t.BindDestination(ch, d) })
		if err != nil {
			return fmt.Errorf("rabbitmq: binding destination %s to exchange %s: %w", d, t.DeliveryExchange(), err)
		}
	}
	return nil
}

// OnChannel runs use on a channel of its own (a failed declaration closes its channel).
func OnChannel(conn *amqp.Connection, use func(ch *amqp.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	err = use(ch)
	if !ch.IsClosed() {
		if cerr := ch.Close(); cerr != nil && err == nil && !errors.Is(cerr, amqp.ErrClosed) {
			err = fmt.Errorf("rabbitmq: closing a channel: %w", cerr)
		}
	}
	return err
}
