package timeouts

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
)

// service runs a manager's background work in one goroutine, from Start to Stop. River's
// startstop is the model. The work is Manager.run: it sets the store up, holds the instance
// name, polls, and at the end gives back what the stop cut short.
//
// The router drives it through the manager's lifecycle handler (routerSignal): the handler's
// Subscribe starts it, and the router's Close stops it.
type service struct {
	work   func(ctx context.Context)
	onStop func() // runs once, when the stop begins

	run     atomic.Pointer[serviceRun] // set by Start, or to &never by a stop that came first
	never   serviceRun
	begun   atomic.Bool // the stop began
	started chan struct{}
	stopped chan struct{}
}

// serviceRun is a started service's context, which the stop cancels.
type serviceRun struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// errStartedTwice is Start's error after an earlier Start or Stop.
var errStartedTwice = errors.New("the manager's background work was already started or stopped")

func newService(work func(ctx context.Context), onStop func()) *service {
	return &service{work: work, onStop: onStop, started: make(chan struct{}), stopped: make(chan struct{})}
}

// Start runs the work in a goroutine until Stop, or until ctx is done. It fails after an
// earlier Start or Stop: a service runs once.
func (s *service) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	if !s.run.CompareAndSwap(nil, &serviceRun{ctx: ctx, cancel: cancel}) {
		cancel()
		return errStartedTwice
	}
	close(s.started)
	// A cancelled ctx begins the stop too, so onStop runs either way.
	context.AfterFunc(ctx, s.begin)
	go func() {
		defer close(s.stopped)
		s.work(ctx)
		s.begin() // the work may end on its own: the instance name is taken
	}()
	return nil
}

// Stop begins the stop and waits until the work has ended. Before Start, it closes Started and
// Stopped at once, and a later Start fails. It may be called more than once.
func (s *service) Stop() {
	s.begin()
	<-s.stopped
}

// begin begins the stop without waiting for the work to end: it cancels the work's context and
// runs onStop, once.
func (s *service) begin() {
	if s.begun.Swap(true) {
		return
	}
	if s.run.CompareAndSwap(nil, &s.never) {
		close(s.started)
		close(s.stopped)
	} else {
		s.run.Load().cancel()
	}
	if s.onStop != nil {
		s.onStop()
	}
}

// Stopping reports whether the stop has begun. It never blocks. It reads the context as well:
// a context cancelled by its parent is done before its AfterFunc runs.
func (s *service) Stopping() bool {
	if s.begun.Load() {
		return true
	}
	r := s.run.Load()
	return r != nil && r.ctx != nil && r.ctx.Err() != nil
}

// Started is closed by Start, or by a Stop that came first.
func (s *service) Started() <-chan struct{} { return s.started }

// Stopped is closed when the work has ended, or by a Stop that came before Start. Started is
// closed before it.
func (s *service) Stopped() <-chan struct{} { return s.stopped }

// routerSignal is the Subscriber of the manager's lifecycle handler. The handler carries no
// messages; it is how the router tells the manager that it runs and that it stops.
//
// The router subscribes each handler as it runs them, and Subscribe starts the service with the
// context the router gives it. The router stops its handlers in two ways at once, the moment
// its Close begins: it cancels that context, and it calls each handler's Subscriber's Close.
// Either begins the stop. So the manager hears of the stop as early as any handler of the
// router, before the router waits for the handlers' work in flight.
type routerSignal struct {
	svc *service
	// none is the handler's message channel. It never carries a message, and is closed when the
	// stop begins, which ends the handler.
	none chan *message.Message
}

func (r *routerSignal) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	if err := r.svc.Start(ctx); err != nil {
		return nil, err
	}
	return r.none, nil
}

func (r *routerSignal) Close() error {
	r.svc.begin()
	return nil
}
