package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
	"github.com/timeoutmill/timeoutmill/internal/amqpmarshal"
	"github.com/timeoutmill/timeoutmill/internal/exclusive"
)

// consumer is a subscription: one AMQP channel whose deliveries are handed out without waiting
// for the previous one's ack, up to handlers at once, with the broker sending prefetch ahead.
// With one handler, each message is handed out once the previous one was settled, in queue
// order. watermill-amqp's subscriber hands out one message per channel and waits for its ack,
// so n messages at once took n channels, each delivery a round trip behind the last ack; here the
// router gets a burst whole (which the satellites batch), and acks go back in few frames (see
// acker).
type consumer struct {
	conn     *amqpconn.Conn
	queue    string
	args     amqp.Table
	handlers int
	prefetch int
	// closeTimeout bounds how long a stopping consumer waits for the messages it handed out to be
	// acked or nacked before it closes its channel (Config.CloseTimeout).
	closeTimeout time.Duration
	logger       watermill.LoggerAdapter
	closing      <-chan struct{}
	out          chan *message.Message
	// exclusive consumes as the queue's only consumer (internal/exclusive); the broker refuses
	// it while the queue has another consumer, and any other consumer while it lasts.
	exclusive bool
	// started receives the outcome of the first attempt to consume, nil once consuming, when
	// it is not nil; Subscribe waits for it on an exclusive subscription.
	started     chan error
	startedOnce sync.Once
}

// report passes the outcome of the first attempt to consume to whoever waits for it.
func (c *consumer) report(err error) {
	if c.started == nil {
		return
	}
	c.startedOnce.Do(func() { c.started <- err })
}

// run consumes until ctx is done or the Subscriber closes, consuming again after every failure
// (a broker restart closes the channel; the connection is made again meanwhile). It
// closes out when it stops.
func (c *consumer) run(ctx context.Context) {
	defer close(c.out)
	wait := 100 * time.Millisecond
	for {
		started, err := c.session(ctx)
		if !started {
			c.report(err)
		}
		if c.stopping(ctx) {
			return
		}
		if started {
			wait = 100 * time.Millisecond
		}
		if errors.Is(err, ErrNotConnected) {
			c.logger.Debug("Waiting for the connection to consume", watermill.LogFields{"reason": err.Error()})
		} else {
			c.logger.Error("Consuming stopped; consuming again", err, nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.closing:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (c *consumer) stopping(ctx context.Context) bool {
	select {
	case <-c.closing:
		return true
	default:
		return ctx.Err() != nil
	}
}

// session consumes on one channel until it closes (error) or the consumer stops (nil). started
// reports whether it got as far as consuming.
func (c *consumer) session(ctx context.Context) (started bool, err error) {
	conn, err := currentConnection(c.conn)
	if err != nil {
		return false, err
	}
	if err := declareQueue(conn, c.queue, c.args); err != nil {
		return false, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("opening a consuming channel: %w", err)
	}
	defer func() {
		if !ch.IsClosed() {
			_ = ch.Close() // requeues whatever is still unacked
		}
	}()
	if err := ch.Qos(c.prefetch, 0, false); err != nil {
		return false, fmt.Errorf("setting the prefetch of %q: %w", c.queue, err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	tag := "timeoutmill-" + watermill.NewShortUUID()
	deliveries, err := ch.Consume(c.queue, tag, false, c.exclusive, false, false, nil)
	if err != nil {
		var refused *amqp.Error
		if c.exclusive && errors.As(err, &refused) && refused.Code == amqp.AccessRefused {
			return false, fmt.Errorf("%w: %q has another consumer, and a deferred queue is never shared (RabbitMQ: %s)",
				exclusive.ErrInUse, c.queue, refused.Reason)
		}
		return false, fmt.Errorf("consuming %q: %w", c.queue, err)
	}
	c.report(nil)
	c.logger.Info("Consuming", watermill.LogFields{"amqp_queue_name": c.queue, "handlers": c.handlers, "prefetch": c.prefetch})

	acks := newAcker(ch)
	lost := make(chan struct{}) // closed when the channel is gone: acks have nowhere to go
	// The contexts of the messages handed out end when the subscription stops (Watermill's
	// contract: a handler is told to stop); their acks are still waited for, up to CloseTimeout.
	msgsCtx, stopMsgs := context.WithCancel(ctx)
	defer stopMsgs()
	var inFlight sync.WaitGroup
	slots := make(chan struct{}, c.handlers)
	defer func() {
		if err != nil {
			close(lost)
		}
		acks.stop()
	}()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return true, c.finish(ch, tag, &inFlight, acks, lost, stopMsgs)
		case <-c.closing:
			return true, c.finish(ch, tag, &inFlight, acks, lost, stopMsgs)
		case e := <-closed:
			return true, channelClosed(e)
		}
		select {
		case d, ok := <-deliveries:
			if !ok {
				return true, consumerGone(ch, closed)
			}
			acks.delivered(d.DeliveryTag)
			msg, done := c.message(msgsCtx, d)
			select {
			case c.out <- msg:
			case <-ctx.Done():
				done()
				acks.nack(d.DeliveryTag)
				return true, c.finish(ch, tag, &inFlight, acks, lost, stopMsgs)
			case <-c.closing:
				done()
				acks.nack(d.DeliveryTag)
				return true, c.finish(ch, tag, &inFlight, acks, lost, stopMsgs)
			}
			inFlight.Add(1)
			go func() {
				defer inFlight.Done()
				defer func() { <-slots }()
				defer done()
				settle(msg, d.DeliveryTag, acks, lost)
			}()
		case <-ctx.Done():
			return true, c.finish(ch, tag, &inFlight, acks, lost, stopMsgs)
		case <-c.closing:
			return true, c.finish(ch, tag, &inFlight, acks, lost, stopMsgs)
		case e := <-closed:
			return true, channelClosed(e)
		}
	}
}

// message is the Watermill message of a delivery; done cancels its context, once it is settled
// (as watermill-amqp's subscriber does).
func (c *consumer) message(ctx context.Context, d amqp.Delivery) (msg *message.Message, done context.CancelFunc) {
	msg, _ = amqpmarshal.Marshaler{}.Unmarshal(d) // never fails: see amqpmarshal.Marshaler
	if d.Redelivered {
		msg.Metadata.Set(wamqp.MetadataRedeliveredKey, "true")
	}
	msgCtx, done := context.WithCancel(ctx)
	msg.SetContext(msgCtx)
	return msg, done
}

// settle passes the handler's ack or nack of msg on to the acker.
func settle(msg *message.Message, tag uint64, acks *acker, lost <-chan struct{}) {
	select {
	case <-msg.Acked():
		acks.ack(tag)
	case <-msg.Nacked():
		acks.nack(tag)
	case <-lost: // the broker requeued it with the channel
	}
}

// finish stops a session in order: no new deliveries, the messages handed out settled (for at
// most c.closeTimeout), their acks sent; closing the channel then requeues the rest.
func (c *consumer) finish(ch *amqp.Channel, tag string, inFlight *sync.WaitGroup, acks *acker, lost chan struct{}, stopMsgs context.CancelFunc) error {
	stopMsgs()
	_ = ch.Cancel(tag, false)
	done := make(chan struct{})
	go func() {
		inFlight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(c.closeTimeout):
		c.logger.Error("Messages still being handled when the subscription stopped; the broker requeues them", nil,
			watermill.LogFields{"amqp_queue_name": c.queue, "waited": c.closeTimeout})
		close(lost)
	}
	acks.stop()
	return nil
}

// consumerGone says why deliveries stopped: the channel closed, or the broker cancelled the
// consumer on an open channel (its queue was deleted), which no close notification follows.
func consumerGone(ch *amqp.Channel, closed <-chan *amqp.Error) error {
	select {
	case e := <-closed:
		return channelClosed(e)
	case <-time.After(time.Second):
	}
	if ch.IsClosed() {
		return channelClosed(nil)
	}
	return errors.New("the broker cancelled the consumer (was its queue deleted?)")
}

func channelClosed(e *amqp.Error) error {
	if e == nil {
		return fmt.Errorf("%w: the consuming channel closed", ErrNotConnected)
	}
	return fmt.Errorf("the consuming channel closed: %w", e)
}
