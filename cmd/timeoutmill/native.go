package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	nativenats "github.com/timeoutmill/timeoutmill/native/nats"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
)

// nativeCmd groups the commands of the native delays: RabbitMQ's delay levels, or NATS
// JetStream's message schedules when --transport is a nats:// URL.
type nativeCmd struct {
	Setup  nativeSetupCmd  `cmd:"" help:"Declare the native delay infrastructure (idempotent): RabbitMQ's 28 delay levels, the delivery exchange and their bindings; or, for a nats:// URL, the JetStream schedule stream."`
	Verify nativeVerifyCmd `cmd:"" help:"Check the native delay infrastructure and exit 1 naming each problem: RabbitMQ's exchanges, queues, TTLs, dead-letter targets, bindings, guard, and that every level moves; or, for a nats:// URL, the schedule stream's settings and that a probe schedule fires."`

	Unroutable nativeUnroutableCmd `cmd:"" help:"Messages whose destination queue was deleted while they were delayed: they wait in PREFIX.delay-unroutable."`
}

// nativeUnroutableCmd groups the commands on the messages the guard set aside.
type nativeUnroutableCmd struct {
	List   nativeUnroutableListCmd   `cmd:"" help:"Count the messages waiting in PREFIX.delay-unroutable by destination, and say whether each destination queue exists now (the messages stay)."`
	Replay nativeUnroutableReplayCmd `cmd:"" help:"Deliver the messages waiting in PREFIX.delay-unroutable to their destination queues, where those exist again; the others stay."`
}

// nativeFlags name the broker and its delay infrastructure.
type nativeFlags struct {
	Transport      string `required:"" help:"RabbitMQ URL: amqp://user:pass@host:5672/vhost (or amqps://); or NATS URL: nats://host:4222 (several joined by commas) for JetStream's message schedules." placeholder:"URL"`
	DelayPrefix    string `default:"timeoutmill" help:"RabbitMQ: prefix of the delay exchanges and queues (PREFIX.delay-level-27 ... PREFIX.delay-delivery)."`
	DelayQueueType string `default:"quorum" enum:"quorum,classic" help:"RabbitMQ: type of the delay level queues: quorum (at-least-once dead-lettering, RabbitMQ 3.10+) or classic."`

	NATSStream        string `name:"nats-stream" default:"timeoutmill_schedules" help:"NATS: the stream that keeps the schedules and captures their destination subjects."`
	NATSSubjectPrefix string `name:"nats-subject-prefix" default:"timeoutmill.schedules" help:"NATS: subjects of the schedules, PREFIX.<message id>."`
	NATSReplicas      int    `name:"nats-replicas" default:"1" help:"NATS: servers of the cluster that keep the schedule stream (setup)."`
}

// isNATS reports whether the flags name a NATS server rather than RabbitMQ.
func (f nativeFlags) isNATS() bool {
	return isNATSURL(f.Transport)
}

func isNATSURL(u string) bool {
	return strings.HasPrefix(strings.TrimSpace(u), "nats://")
}

func (f nativeFlags) natsConfig() nativenats.Config {
	return nativenats.Config{URL: f.Transport, Stream: f.NATSStream, SubjectPrefix: f.NATSSubjectPrefix, Replicas: f.NATSReplicas}
}

// natsPublisher opens a native NATS Publisher with the flags' settings.
func (f nativeFlags) natsPublisher(logger watermill.LoggerAdapter) (*nativenats.Publisher, error) {
	pub, err := nativenats.NewPublisher(f.natsConfig(), logger)
	if errors.Is(err, nativenats.ErrInvalidConfig) {
		return nil, fmt.Errorf("%w: %w", connect.ErrInvalid, connect.RedactError(err, f.Transport))
	}
	if err != nil {
		return nil, connect.RedactError(err, f.Transport)
	}
	return pub, nil
}

// describeNATS says where the schedule stream is, for output.
func (f nativeFlags) describeNATS() string {
	return fmt.Sprintf("%s (stream %s, schedules %s.>)", connect.Redact(f.Transport), f.NATSStream, f.NATSSubjectPrefix)
}

func (f nativeFlags) config() rabbitmq.Config {
	return rabbitmq.Config{URL: f.Transport, Prefix: f.DelayPrefix, QueueType: rabbitmq.QueueType(f.DelayQueueType)}
}

// describe says where the infrastructure is, for output.
func (f nativeFlags) describe() string {
	return fmt.Sprintf("%s (prefix %s, %s queues)", connect.Redact(f.Transport), f.DelayPrefix, f.DelayQueueType)
}

// topology opens a connection and returns the topology the flags name; close the connection.
func (f nativeFlags) topology() (nativedelay.Topology, *amqp.Connection, error) {
	if f.isNATS() {
		return nativedelay.Topology{}, nil, fmt.Errorf("%w: this command is RabbitMQ's: NATS schedules have no delay levels and no unroutable queue (a schedule's destination is captured by its own stream)", connect.ErrInvalid)
	}
	cfg := f.config()
	if err := cfg.Validate(); err != nil {
		return nativedelay.Topology{}, nil, fmt.Errorf("%w: %w", connect.ErrInvalid, err)
	}
	topo, err := nativedelay.NewTopology(cfg.Prefix, cfg.QueueType)
	if err != nil {
		return nativedelay.Topology{}, nil, err
	}
	conn, err := amqpconn.DialFirst(f.Transport, amqp.Config{
		Properties: amqp.Table{"connection_name": "timeoutmill native"},
		Dial:       amqp.DefaultDial(rabbitmq.DefaultDialTimeout),
	})
	if err != nil {
		return nativedelay.Topology{}, nil, fmt.Errorf("connecting to %s: %w", connect.Redact(f.Transport), connect.RedactError(err, f.Transport))
	}
	return topo, conn, nil
}

// publisher opens a native Publisher with the flags' settings and a channel for each of channels
// concurrent senders.
func (f nativeFlags) publisher(logger watermill.LoggerAdapter, channels int) (*rabbitmq.Publisher, error) {
	cfg := f.config()
	cfg.ChannelPoolSize = channels
	pub, err := rabbitmq.NewPublisher(cfg, logger)
	if err != nil {
		return nil, connect.RedactError(err, f.Transport)
	}
	return pub, nil
}

type nativeSetupCmd struct {
	nativeFlags `embed:""`
	Destination []string `name:"destination" sep:"none" placeholder:"QUEUE" help:"RabbitMQ: also bind this existing destination queue to the delivery exchange (repeatable), replacing the '#.QUEUE' binding of earlier versions, which also caught messages for queues named '*.QUEUE'. NATS: make the schedule stream capture this destination subject (repeatable), before its consumers start."`
}

// Run declares the delay infrastructure.
func (c *nativeSetupCmd) Run(e *env) error {
	if c.isNATS() {
		return c.runNATS(e)
	}
	topo, conn, err := c.topology()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := topo.Setup(e.ctx, conn); err != nil {
		return connect.RedactError(err, c.Transport)
	}
	fmt.Fprintf(e.stdout, "native delay infrastructure ready on %s:\n  exchanges and queues %s .. %s, exchange %s, queue %s\n"+
		"  guard: exchange %s, whose alternate exchange %s keeps what it cannot route in queue %s\n",
		c.describe(), topo.Exchange(nativedelay.Levels-1), topo.Exchange(0), topo.DeliveryExchange(), topo.ProbeQueue(),
		topo.DestinationsExchange(), topo.UnroutableExchange(), topo.UnroutableQueue())
	if len(c.Destination) == 0 {
		return nil
	}
	if err := topo.BindDestinations(e.ctx, conn, c.Destination...); err != nil {
		return connect.RedactError(err, c.Transport)
	}
	fmt.Fprintf(e.stdout, "  destinations bound through %s on %sQUEUE: %s\n", topo.DestinationsExchange(), strings.Repeat("*.", nativedelay.Levels), strings.Join(c.Destination, ", "))
	return nil
}

// runNATS creates or updates the schedule stream, and adds the destinations to it.
func (c *nativeSetupCmd) runNATS(e *env) error {
	pub, err := c.natsPublisher(newLogger(e))
	if err != nil {
		return err
	}
	defer pub.Close()
	if err := pub.Setup(e.ctx); err != nil {
		return connect.RedactError(err, c.Transport)
	}
	fmt.Fprintf(e.stdout, "native schedules ready on %s:\n  stream %s, %d replica(s), message schedules allowed, capturing %s.>\n",
		c.describeNATS(), c.NATSStream, c.NATSReplicas, c.NATSSubjectPrefix)
	if len(c.Destination) == 0 {
		return nil
	}
	if err := pub.EnsureDestinations(e.ctx, c.Destination...); err != nil {
		return connect.RedactError(err, c.Transport)
	}
	fmt.Fprintf(e.stdout, "  destinations captured by %s: %s\n", c.NATSStream, strings.Join(c.Destination, ", "))
	return nil
}

type nativeVerifyCmd struct {
	nativeFlags `embed:""`
}

// Run checks the delay infrastructure; a problem is an error, so the exit code is 1.
func (c *nativeVerifyCmd) Run(e *env) error {
	if c.isNATS() {
		return c.runNATS(e)
	}
	topo, conn, err := c.topology()
	if err != nil {
		return err
	}
	defer conn.Close()
	err = topo.Verify(e.ctx, conn)
	var verr *nativedelay.VerifyError
	if errors.As(err, &verr) {
		lines := make([]string, len(verr.Problems))
		for i, p := range verr.Problems {
			lines[i] = "  " + p.String()
		}
		return fmt.Errorf("native delay infrastructure on %s: %d problem(s) (`timeoutmill native setup` declares missing pieces):\n%s",
			c.describe(), len(lines), strings.Join(lines, "\n"))
	}
	if err != nil {
		return connect.RedactError(err, c.Transport)
	}
	fmt.Fprintf(e.stdout, "native delay infrastructure on %s: ok\n  %d levels (exchange, queue, TTL, dead-letter exchange, bindings), delivery exchange, guard, probe queue; every level watched moves\n",
		c.describe(), nativedelay.Levels)
	return nil
}

// runNATS checks the schedule stream and fires a probe schedule.
func (c *nativeVerifyCmd) runNATS(e *env) error {
	pub, err := c.natsPublisher(newLogger(e))
	if err != nil {
		return err
	}
	defer pub.Close()
	if err := pub.Verify(e.ctx); err != nil {
		if errors.Is(err, nativenats.ErrStream) {
			return fmt.Errorf("native schedules on %s: %w (`timeoutmill native setup` fixes the stream's settings)", c.describeNATS(), connect.RedactError(err, c.Transport))
		}
		return connect.RedactError(err, c.Transport)
	}
	fmt.Fprintf(e.stdout, "native schedules on %s: ok\n  stream %s allows message schedules and captures %s.>; no limit removes a pending schedule; a probe schedule fired, not early\n",
		c.describeNATS(), c.NATSStream, c.NATSSubjectPrefix)
	return nil
}

type nativeUnroutableListCmd struct {
	nativeFlags `embed:""`
	Limit       int `default:"100000" help:"Read at most this many messages."`
}

// Run counts the messages in the unroutable queue by destination.
func (c *nativeUnroutableListCmd) Run(e *env) error {
	topo, conn, err := c.topology()
	if err != nil {
		return err
	}
	defer conn.Close()
	counts, err := topo.ListUnroutable(e.ctx, conn, c.Limit)
	if err != nil {
		return connect.RedactError(err, c.Transport)
	}
	printUnroutable(e, topo, counts, false)
	return nil
}

type nativeUnroutableReplayCmd struct {
	nativeFlags `embed:""`
	Destination []string `name:"destination" sep:"none" placeholder:"QUEUE" help:"Replay only the messages for this destination queue (repeatable); all by default."`
}

// Run delivers the messages of the unroutable queue whose destination queue exists; exit 1 when
// some stay.
func (c *nativeUnroutableReplayCmd) Run(e *env) error {
	topo, conn, err := c.topology()
	if err != nil {
		return err
	}
	defer conn.Close()
	counts, err := topo.ReplayUnroutable(e.ctx, conn, c.Destination)
	printUnroutable(e, topo, counts, true)
	if err != nil {
		return connect.RedactError(err, c.Transport)
	}
	for _, u := range counts {
		if u.Messages > u.Replayed && (len(c.Destination) == 0 || slices.Contains(c.Destination, u.Destination)) {
			return fmt.Errorf("some messages stay in %s: create their destination queue, then replay again", topo.UnroutableQueue())
		}
	}
	return nil
}

func printUnroutable(e *env, topo nativedelay.Topology, counts []nativedelay.Unroutable, replay bool) {
	total, replayed := 0, 0
	for _, u := range counts {
		total += u.Messages
		replayed += u.Replayed
	}
	if replay {
		fmt.Fprintf(e.stdout, "%s: %d message(s) replayed, %d stay\n", topo.UnroutableQueue(), replayed, total-replayed)
	} else {
		fmt.Fprintf(e.stdout, "%s: %d message(s)\n", topo.UnroutableQueue(), total)
	}
	for _, u := range counts {
		dest, state := u.Destination, "queue missing"
		switch {
		case dest == "":
			dest, state = "(routing key names no destination)", "cannot be replayed"
		case u.QueueExists:
			state = "queue exists"
		}
		if replay {
			fmt.Fprintf(e.stdout, "  %s: %d replayed, %d stay (%s)\n", dest, u.Replayed, u.Messages-u.Replayed, state)
		} else {
			fmt.Fprintf(e.stdout, "  %s: %d (%s)\n", dest, u.Messages, state)
		}
	}
}
