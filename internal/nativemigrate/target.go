package nativemigrate

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	nativenats "github.com/timeoutmill/timeoutmill/native/nats"
	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
)

// Item is a stored timeout as a message to deliver to Destination when Due comes.
type Item struct {
	Destination string
	Due         time.Time
	Message     *message.Message
}

// Target is the native delay a migration sends timeouts to.
type Target interface {
	// Verify returns problem, an error saying what is wrong with the delay infrastructure, or
	// err when it could not check.
	Verify(ctx context.Context) (problem, err error)
	// CheckDestination says whether timeouts can be sent to destination: invalid when never,
	// missing when it must be created first; err when it could not check.
	CheckDestination(ctx context.Context, destination string) (invalid error, missing bool, err error)
	// Send sends items and returns a result per item, as rabbitmq.Publisher.Send does.
	Send(ctx context.Context, now time.Time, items []Item) ([]error, error)
	// Unconfirmed reports whether an item's error leaves its fate unknown: such a timeout is put
	// back rather than reported unmigratable.
	Unconfirmed(err error) bool
	// MaxDelay is the longest delay the target holds; 0 for no limit of its own.
	MaxDelay() time.Duration
	// Name names the target in messages.
	Name() string
}

// RabbitMQ is the target of RabbitMQ's delay levels.
func RabbitMQ(p *rabbitmq.Publisher) Target { return rabbitTarget{p} }

type rabbitTarget struct{ p *rabbitmq.Publisher }

func (t rabbitTarget) Verify(ctx context.Context) (error, error) {
	err := t.p.Verify(ctx)
	if errors.Is(err, rabbitmq.ErrTopology) {
		return err, nil
	}
	return nil, err
}

func (t rabbitTarget) CheckDestination(ctx context.Context, d string) (error, bool, error) {
	if err := nativedelay.ValidateDestination(d); err != nil {
		return err, false, nil
	}
	exists, err := t.p.DestinationExists(ctx, d)
	return nil, err == nil && !exists, err
}

func (t rabbitTarget) Send(ctx context.Context, now time.Time, items []Item) ([]error, error) {
	out := make([]rabbitmq.Delayed, len(items))
	for i, it := range items {
		out[i] = rabbitmq.Delayed(it)
	}
	return t.p.Send(ctx, now, out)
}

func (rabbitTarget) Unconfirmed(err error) bool { return errors.Is(err, rabbitmq.ErrNotConfirmed) }
func (rabbitTarget) MaxDelay() time.Duration    { return rabbitmq.MaxDelay }
func (rabbitTarget) Name() string               { return "RabbitMQ's delay levels" }

// NATS is the target of JetStream's message schedules. A timeout sent again replaces its own
// pending schedule (one schedule subject per id), and one sent at once because it is due
// carries its id as Nats-Msg-Id, so a rerun within the stream's duplicate window adds no copy.
func NATS(p *nativenats.Publisher) Target { return natsTarget{p} }

type natsTarget struct{ p *nativenats.Publisher }

func (t natsTarget) Verify(ctx context.Context) (error, error) {
	err := t.p.Verify(ctx)
	if errors.Is(err, nativenats.ErrStream) {
		return err, nil
	}
	return nil, err
}

func (t natsTarget) CheckDestination(ctx context.Context, d string) (error, bool, error) {
	err := t.p.CheckDestination(ctx, d)
	if errors.Is(err, nativenats.ErrInvalidDestination) {
		return err, false, nil
	}
	return nil, false, err
}

func (t natsTarget) Send(ctx context.Context, now time.Time, items []Item) ([]error, error) {
	out := make([]nativenats.Delayed, len(items))
	for i, it := range items {
		out[i] = nativenats.Delayed(it)
	}
	return t.p.Send(ctx, now, out)
}

func (natsTarget) Unconfirmed(err error) bool {
	return errors.Is(err, nativenats.ErrNotConfirmed) || errors.Is(err, nativenats.ErrStream) || errors.Is(err, nativenats.ErrClosed)
}
func (natsTarget) MaxDelay() time.Duration { return 0 }
func (natsTarget) Name() string            { return "NATS message schedules" }
