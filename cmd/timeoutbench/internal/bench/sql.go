package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
	"github.com/timeoutmill/timeoutmill/wire"
)

// Settings of the SQL transport scenario.
const (
	// sqlConsumers is sqltransport.Config.Consumers of the timeout manager's queues.
	sqlConsumers = 8
	// sqlReceiverConsumers consume the destination.
	sqlReceiverConsumers = 4
	// sqlBatchSize is sqltransport.Config.BatchSize of every consumer: with several consumers
	// each hands its whole batch out at once, so the dispatch satellite forwards up to
	// sqlConsumers × sqlBatchSize due timeouts in a few exactly-once transactions.
	sqlBatchSize = 100
)

// withParams adds runtime parameters to a PostgreSQL URL (pgx passes unknown ones to the server).
func withParams(dsn string, params map[string]string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("the PostgreSQL DSN must be a URL here: %w", err)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// sqlTransport is the emulated pipeline on transport/sqltransport with the PostgreSQL store in
// the same database, forwarding exactly once.
func sqlTransport() System {
	return System{
		Name:  "SQL transport + PostgreSQL (exactly once)",
		Needs: []string{"postgres"},
		SQL:   true,
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			schema, err := newSchema(ctx, env.PostgresDSN)
			if err != nil {
				return nil, err
			}
			closers := cleanup{schema.drop}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			endpoint := endpointName()
			store, err := schema.store(ctx, env.PostgresDSN, endpoint)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, store.Close)
			cfg := sqltransport.Config{Dialect: sqltransport.PostgreSQL, DSN: env.PostgresDSN, Schema: schema.name, Consumers: sqlConsumers, BatchSize: sqlBatchSize}
			pub, sub, err := sqltransport.New(ctx, cfg, env.logger())
			if err != nil {
				return fail(err)
			}
			closers = append(closers, pub.Close, sub.Close)
			errorQueue := endpoint + ".error"
			if err := pub.DeclareEndpoint(ctx, endpoint, errorQueue); err != nil {
				return fail(err)
			}
			if err := pub.DeclareQueues(ctx, dest); err != nil {
				return fail(err)
			}
			forwarder, err := sqltransport.NewExactlyOnceForwarder(ctx, pub, store, env.logger())
			if err != nil {
				return fail(err)
			}
			recvCfg := cfg
			recvCfg.Consumers = sqlReceiverConsumers
			// The receiver is in this process: the publisher wakes it when it forwards messages.
			recv, err := pub.NewSubscriber(ctx, recvCfg, env.logger())
			if err != nil {
				return fail(err)
			}
			closers = append(closers, recv.Close)
			arrivals, err := recv.Subscribe(ctx, dest)
			if err != nil {
				return fail(err)
			}
			p, err := startPipeline(ctx, env, timeouts.Config{
				Endpoint: endpoint, Store: store, Publisher: pub, Subscriber: sub, ErrorQueue: errorQueue, Forwarder: forwarder,
			})
			if err != nil {
				return fail(err)
			}
			closers = append(closers, p.close)
			return &Rig{
				Mark:     timeouts.DeliverAt,
				Publish:  p.manager.Publisher().Publish,
				Arrivals: arrivals,
				Pending:  pendingOf(store),
				Close:    closers.run,
				Notes: []string{fmt.Sprintf("%d consumers per satellite queue, %d on the destination, BatchSize %d, poll %s; receiver woken by the publisher (Publisher.NewSubscriber)",
					sqlConsumers, sqlReceiverConsumers, sqlBatchSize, sqltransport.DefaultPollInterval)},
			}, nil
		},
	}
}

// watermillPeer is watermill-sql v4's DelayedPostgreSQL publisher and subscriber with their
// defaults (a 1 s poll), deleting messages on ack, delays set with Watermill's delay.Message.
func watermillPeer() System {
	return System{
		Name:      "peer: watermill-sql DelayedPostgreSQL",
		Needs:     []string{"postgres"},
		SQL:       true,
		Reference: true,
		Open: func(ctx context.Context, env Env, dest string) (*Rig, error) {
			schema, err := newSchema(ctx, env.PostgresDSN)
			if err != nil {
				return nil, err
			}
			closers := cleanup{schema.drop}
			fail := func(err error) (*Rig, error) { return nil, errors.Join(err, closers.run()) }
			// Its tables go in the schema by search_path; UTC, as its due-time comparison assumes.
			dsn, err := withParams(env.PostgresDSN, map[string]string{"search_path": schema.name, "timezone": "UTC"})
			if err != nil {
				return fail(err)
			}
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, db.Close)
			logger := env.logger()
			pub, err := wsql.NewDelayedPostgreSQLPublisher(wsql.BeginnerFromStdSQL(db), wsql.DelayedPostgreSQLPublisherConfig{Logger: logger})
			if err != nil {
				return fail(fmt.Errorf("creating the peer's publisher: %w", err))
			}
			closers = append(closers, pub.Close)
			sub, err := wsql.NewDelayedPostgreSQLSubscriber(wsql.BeginnerFromStdSQL(db), wsql.DelayedPostgreSQLSubscriberConfig{DeleteOnAck: true, Logger: logger})
			if err != nil {
				return fail(fmt.Errorf("creating the peer's subscriber: %w", err))
			}
			closers = append(closers, sub.Close)
			arrivals, err := sub.Subscribe(ctx, dest)
			if err != nil {
				return fail(fmt.Errorf("subscribing to %s: %w", dest, err))
			}
			// No Pending: a message is in the table once Publish returns (one INSERT, committed).
			// So each backlog's pilot is due at once and delivered, not left in the table: the
			// peer reads its table in insertion order and steps over every row not yet due, so
			// pilots held for an hour would slow each run more than the one before.
			return &Rig{
				Mark:     func(msg *message.Message, due time.Time) { delay.Message(msg, delay.Until(due)) },
				Publish:  pub.Publish,
				Arrivals: arrivals,
				Close:    closers.run,
				Notes:    []string{"defaults: 1 s poll, due time in whole seconds (" + wire.HeaderWatermillDelayedUntil + ")"},
			}, nil
		},
	}
}
