package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/memory"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/timeouts"
)

// pipeline is a timeouts.Manager run by a router of its own: the emulated timeout manager.
type pipeline struct {
	manager *timeouts.Manager
	router  *message.Router
	stopped chan struct{}
}

// startPipeline runs the manager of cfg until close.
func startPipeline(ctx context.Context, env Env, cfg timeouts.Config) (*pipeline, error) {
	manager, err := timeouts.NewManager(cfg, env.logger())
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, env.logger())
	if err != nil {
		return nil, fmt.Errorf("creating the router: %w", err)
	}
	if err := manager.AddToRouter(router); err != nil {
		return nil, fmt.Errorf("adding the manager to the router: %w", err)
	}
	p := &pipeline{manager: manager, router: router, stopped: make(chan struct{})}
	go func() {
		defer close(p.stopped)
		if err := router.Run(context.WithoutCancel(ctx)); err != nil {
			env.logger().Error("Router stopped", err, nil)
		}
	}()
	select {
	case <-router.Running():
		return p, nil
	case <-p.stopped:
		return nil, errors.New("the router stopped at once")
	case <-time.After(30 * time.Second):
		_ = router.Close()
		return nil, errors.New("the router did not start within 30 s")
	}
}

func (p *pipeline) close() error {
	err := p.router.Close()
	<-p.stopped
	<-p.manager.Done()
	return errors.Join(err, p.manager.Err())
}

// pendingOf counts what an Inspector store holds.
func pendingOf(store persistence.Store) func(ctx context.Context) (int, error) {
	inspector, ok := store.(persistence.Inspector)
	if !ok {
		return nil
	}
	return func(ctx context.Context) (int, error) {
		st, err := inspector.Stats(ctx, time.Now())
		return st.Pending, err
	}
}

func endpointName() string { return "tb" + watermill.NewShortUUID() }

// goChannelSystem is the emulated pipeline on Watermill's in-process GoChannel with a store.
func goChannelSystem(name string, open func(ctx context.Context, env Env, endpoint string) (persistence.Store, error)) System {
	return System{
		Name: name,
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, env.logger())
			arrivals, err := pubsub.Subscribe(ctx, dest)
			if err != nil {
				return nil, fmt.Errorf("subscribing to %s: %w", dest, err)
			}
			endpoint := endpointName()
			store, err := open(ctx, env, endpoint)
			if err != nil {
				return nil, errors.Join(err, pubsub.Close())
			}
			p, err := startPipeline(ctx, env, timeouts.Config{
				Endpoint: endpoint, Store: store, Publisher: pubsub, Subscriber: pubsub,
			})
			if err != nil {
				return nil, errors.Join(err, pubsub.Close(), store.Close())
			}
			return &Rig{
				Mark:     timeouts.DeliverAt,
				Publish:  p.manager.Publisher().Publish,
				Arrivals: arrivals,
				Pending:  pendingOf(store),
				Close: func() error {
					return errors.Join(p.close(), pubsub.Close(), store.Close())
				},
				Notes: []string{"defaults"},
			}, nil
		},
	}
}

func openMemory(context.Context, Env, string) (persistence.Store, error) {
	return memory.New(), nil
}

func openSQLite(ctx context.Context, env Env, endpoint string) (persistence.Store, error) {
	store, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(env.TempDir, endpoint+".db"), Endpoint: endpoint})
	if err != nil {
		return nil, fmt.Errorf("opening SQLite: %w", err)
	}
	return store, nil
}

// cleanup undoes a rig's set-up, last step first.
type cleanup []func() error

func (c cleanup) run() error {
	var err error
	for i := len(c) - 1; i >= 0; i-- {
		err = errors.Join(err, c[i]())
	}
	return err
}
