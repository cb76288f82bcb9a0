package timeouts

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// lifecycle is what a manager's stop changes. It tells which failures are the stop's doing
// rather than the store's or the broker's. It also says what the manager gives back to the store
// when it ends.
//
// The stop begins when the service's stop begins (see routerSignal): the router starts closing,
// or its context is cancelled. A GoChannel that closed counts as a stop too (stopping). From
// then on the poller claims nothing more, and the breakers are stopped for good. A forward or
// announcement that fails is not counted against the timeout. It is left in the store. It is
// given back (Release) at once where it would otherwise wait for its lease.
type lifecycle struct {
	store  persistence.Store
	logger watermill.LoggerAdapter
	svc    *service
	// goChannel is the Publisher when it is Watermill's in-process GoChannel. Its messages live
	// only as long as the process. An announcement or forward on it that a stop cuts short
	// may be discarded without an error. So the manager keeps track of every id it claimed
	// until its dispatch satellite has settled it. It gives back the others when it stops.
	goChannel *gochannel.GoChannel
	now       func() time.Time // the store's time, which claims' leases are on

	mu     sync.Mutex
	claims map[string]time.Time // GoChannel only: ids claimed and not settled, by lease end
	pruned time.Time
}

func newLifecycle(store persistence.Store, publisher message.Publisher, svc *service, logger watermill.LoggerAdapter) *lifecycle {
	l := &lifecycle{store: store, logger: logger, svc: svc, now: time.Now}
	if g, ok := publisher.(*gochannel.GoChannel); ok {
		l.goChannel = g
		l.claims = map[string]time.Time{}
	}
	return l
}

// errGoChannelAcks is why NewManager refuses a GoChannel that does not wait for its subscribers.
var errGoChannelAcks = errors.New("Publisher is a GoChannel without BlockPublishUntilSubscriberAck: " +
	"its Publish returns before any subscriber has the message, and a message it discards when it " +
	"closes would count as delivered and its timeout be removed; create it with " +
	"gochannel.Config{BlockPublishUntilSubscriberAck: true}")

// checkGoChannel refuses a GoChannel publisher whose Publish does not wait for the subscribers'
// acks. Only with that wait does a forward that returned mean a subscriber has the message.
//
// GoChannel keeps its Config unexported and has no method that tells. Reading the field is all
// reflection allows. A behavioural check would need a Subscribe, which waits for the publishes
// in flight. A GoChannel may be busy already, waiting for a handler that publishes. There it
// would hang NewManager and the handler. A renamed field refuses every GoChannel, loudly.
func checkGoChannel(p message.Publisher) error {
	g, ok := p.(*gochannel.GoChannel)
	if !ok {
		return nil
	}
	cfg := reflect.ValueOf(g).Elem().FieldByName("config")
	if !cfg.IsValid() {
		return fmt.Errorf("cannot tell whether the GoChannel Publisher waits for its subscribers' acks")
	}
	if f := cfg.FieldByName("BlockPublishUntilSubscriberAck"); !f.IsValid() || f.Kind() != reflect.Bool || !f.Bool() {
		return errGoChannelAcks
	}
	return nil
}

// stopping reports whether the stop has begun, or the GoChannel closed. It never blocks.
func (l *lifecycle) stopping() bool {
	return l.svc.Stopping() || l.goChannel != nil && goChannelClosed(l.goChannel)
}

// goChannelClosed reports whether g is closed. GoChannel tells it only through Publish and
// Subscribe, which refuse to work once it is closed. A Publish of no messages publishes nothing.
//
// It must be read, not watched. A GoChannel that closes makes the Publish calls in flight
// return nil, and the forward's caller asks right after. Its own goroutines, which close its
// subscriptions, may not have run yet. A Close by another handler of the router may not have
// reached the manager's lifecycle handler yet either.
func goChannelClosed(g *gochannel.GoChannel) bool { return g.Publish(closedProbeTopic) != nil }

// closedProbeTopic is published to with no messages, to ask a GoChannel whether it is closed.
const closedProbeTopic = "timeoutmill.closed-probe"

// interrupted reports whether a forward or announcement that returned without an error may still
// not have reached its subscriber. That is on a GoChannel, once the stop has begun.
func (l *lifecycle) interrupted() bool { return l.goChannel != nil && l.stopping() }

// claimed records ids claimed until until, on a GoChannel.
func (l *lifecycle) claimed(ids []string, until time.Time) {
	if l.claims == nil {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		l.claims[id] = until
	}
	// An id whose announcement was lost without an error is claimed again by a poller when its
	// lease ends. Forget it then, so the map holds at most a lease's worth of such ids.
	if now.Sub(l.pruned) > time.Minute {
		l.pruned = now
		for id, end := range l.claims {
			if end.Before(now) {
				delete(l.claims, id)
			}
		}
	}
}

// settled records that the dispatch satellite is done with ids. They were delivered and
// removed, gone already, or moved to the error queue.
func (l *lifecycle) settled(ids ...string) {
	if l.claims == nil {
		return
	}
	l.mu.Lock()
	for _, id := range ids {
		delete(l.claims, id)
	}
	l.mu.Unlock()
}

// unsettled returns the ids claimed on a GoChannel whose lease still runs and that the dispatch
// satellite did not settle.
func (l *lifecycle) unsettled() []string {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id, end := range l.claims {
		if end.After(now) {
			ids = append(ids, id)
		}
	}
	clear(l.claims)
	return ids
}

// releaseTimeout bounds giving claimed timeouts back at the stop.
const releaseTimeout = 30 * time.Second

// release gives claimed ids back to the store. So the next poller claims them at once, not
// when their lease runs out. A store that cannot (not a persistence.Releaser) keeps them until
// then.
func (l *lifecycle) release(ids []string, why string) {
	if len(ids) == 0 {
		return
	}
	fields := watermill.LogFields{"count": len(ids), "reason": why}
	r, ok := l.store.(persistence.Releaser)
	if !ok {
		l.logger.Info("Claimed timeouts not delivered before the stop wait for their lease (the store cannot release them)", fields)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	n, err := r.Release(ctx, ids)
	if err != nil {
		l.logger.Error("Releasing claimed timeouts at the stop failed; they wait for their lease", err, fields)
		return
	}
	fields["released"] = n
	l.logger.Info("Released claimed timeouts not delivered before the stop", fields)
}
