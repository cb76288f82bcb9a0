package sqltransport

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/satellites"
)

// ErrExactlyOnceUnsupported is returned when exactly once is asked for where the store and the
// transport cannot share a transaction. errors.Is also finds persistence.ErrUnsupported in it.
var ErrExactlyOnceUnsupported error = exactlyOnceUnsupported{}

type exactlyOnceUnsupported struct{}

func (exactlyOnceUnsupported) Error() string { return "sqltransport: exactly once is not possible" }
func (exactlyOnceUnsupported) Unwrap() error { return persistence.ErrUnsupported }

// ExactlyOnceForwarder delivers a due timeout's message and removes the timeout in one
// PostgreSQL transaction: the store's row is deleted and the message's row inserted into its
// destination's table together, or neither is. A crash, a lost connection or a failed commit
// between the two therefore cannot deliver a message twice, and a timeout already gone
// (dispatched by another instance, or cancelled) publishes nothing. It is the dispatch
// satellite's Forwarder (satellites.Forwarder) when the transport is this package's on the same
// PostgreSQL database as the store. It runs on the Publisher's pool: close the Publisher only
// after the router that dispatches with it.
type ExactlyOnceForwarder struct {
	db     *sql.DB // the transport's, so destination tables resolve as its consumers see them
	store  *postgres.Store
	schema queueSchema
	tables *tableCache
	wake   *wakeups // the Publisher's: its subscribers' consumers take forwarded messages at once
	logger watermill.LoggerAdapter

	// beforeCommit, when set, runs after the publish and before the commit; an error rolls the
	// transaction back. Tests use it to fail or crash between forwarding and committing.
	beforeCommit func(ctx context.Context, tx *sql.Tx) error
}

var _ satellites.BatchForwarder = (*ExactlyOnceForwarder)(nil)

// NewExactlyOnceForwarder returns the forwarder for a transport and a store that share one
// PostgreSQL database: publisher must be this package's Publisher on PostgreSQL and store the
// persistence/postgres Store, and both must reach the same database (checked now, by taking an
// advisory lock through one and finding it held through the other, so that two DSNs naming one
// database in different words are recognised and a same-named database on another server is
// not). Anything else fails with ErrExactlyOnceUnsupported and says why: the store's delete
// and the publish could not commit together, so delivery could only be at least once.
func NewExactlyOnceForwarder(ctx context.Context, publisher message.Publisher, store persistence.Store, logger watermill.LoggerAdapter) (*ExactlyOnceForwarder, error) {
	pub, ok := publisher.(*Publisher)
	if !ok {
		return nil, fmt.Errorf("%w: the transport's publisher is a %T, not a watermill-sql one of transport/sqltransport, "+
			"so delivering a message cannot share a transaction with removing its timeout from the store", ErrExactlyOnceUnsupported, publisher)
	}
	if pub.dialect() != PostgreSQL {
		return nil, fmt.Errorf("%w: the transport is on MariaDB/MySQL; exactly once is implemented for a transport and a store "+
			"on one PostgreSQL database", ErrExactlyOnceUnsupported)
	}
	pg, ok := store.(*postgres.Store)
	if !ok {
		return nil, fmt.Errorf("%w: the store is a %T, not the PostgreSQL store (persistence/postgres), "+
			"so removing a timeout cannot share a transaction with the transport's publish", ErrExactlyOnceUnsupported, store)
	}
	same, err := sameDatabase(ctx, pub.db, pg.DB())
	if err != nil {
		return nil, fmt.Errorf("sqltransport: checking that the store and the transport share a database: %w", err)
	}
	if !same {
		return nil, fmt.Errorf("%w: the store is on %s and the transport on %s: different databases cannot share a transaction",
			ErrExactlyOnceUnsupported, describe(ctx, pg.DB()), describe(ctx, pub.db))
	}
	return &ExactlyOnceForwarder{
		db:     pub.db,
		store:  pg,
		schema: pub.schema,
		tables: pub.tables,
		wake:   pub.wake,
		logger: loggerOrNop(logger),
	}, nil
}

// Forward deletes timeout t from the store and publishes msg to t.Destination in one
// transaction. removed is false when the timeout was gone already; nothing is published then.
// On an error nothing happened, except when the commit itself failed, whose outcome the
// database alone knows: the dispatch satellite then looks the timeout up again, and finds it
// gone if the commit had gone through.
func (f *ExactlyOnceForwarder) Forward(ctx context.Context, t persistence.Timeout, msg *message.Message) (removed bool, err error) {
	gone, err := f.forward(ctx, []satellites.Forwarding{{Timeout: t, Message: msg}})
	if err != nil {
		return false, fmt.Errorf("sqltransport: forwarding timeout %s to %q: %w", t.ID, t.Destination, err)
	}
	return len(gone) == 1, nil
}

// ForwardMany deletes the timeouts of fs from the store and publishes the messages of those it
// deleted to their destinations, all in one transaction: one DELETE, one INSERT per destination,
// one commit. It returns the ids it deleted; the others were gone already (dispatched by another
// instance, or cancelled), and nothing is published for them. On an error nothing happened,
// except when the commit itself failed, as for Forward.
func (f *ExactlyOnceForwarder) ForwardMany(ctx context.Context, fs []satellites.Forwarding) (removed []string, err error) {
	removed, err = f.forward(ctx, fs)
	if err != nil {
		return nil, fmt.Errorf("sqltransport: forwarding %d timeouts: %w", len(fs), err)
	}
	return removed, nil
}

func (f *ExactlyOnceForwarder) forward(ctx context.Context, fs []satellites.Forwarding) (removed []string, err error) {
	if len(fs) == 0 {
		return nil, nil
	}
	var destinations []string
	byDestination := map[string][]satellites.Forwarding{}
	ids := make([]string, len(fs))
	for i, fw := range fs {
		ids[i] = fw.Timeout.ID
		if _, ok := byDestination[fw.Timeout.Destination]; !ok {
			destinations = append(destinations, fw.Timeout.Destination)
		}
		byDestination[fw.Timeout.Destination] = append(byDestination[fw.Timeout.Destination], fw)
	}
	// Creating a table inside the transaction could commit it implicitly: do it first.
	if err := f.tables.ensure(ctx, destinations...); err != nil {
		return nil, err
	}
	inserts, args, err := f.inserts(destinations, byDestination)
	if err != nil {
		return nil, err
	}
	if f.beforeCommit == nil {
		// One statement is one transaction: the deletes and the inserts commit together.
		removed, err = f.store.RemoveManyWith(ctx, f.db, ids, inserts, args...)
		if err != nil {
			return nil, err
		}
	} else {
		if removed, err = f.forwardInTx(ctx, ids, inserts, args); err != nil {
			return nil, err
		}
	}
	if len(removed) > 0 {
		for _, dest := range destinations {
			f.wake.notify(dest)
		}
	}
	return removed, nil
}

// forwardInTx runs the forwarding statement in a transaction of its own, and beforeCommit
// before committing it: tests fail or crash there, between forwarding and committing.
func (f *ExactlyOnceForwarder) forwardInTx(ctx context.Context, ids, inserts []string, args []any) ([]string, error) {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("beginning the transaction: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	removed, err := f.store.RemoveManyWith(ctx, tx, ids, inserts, args...)
	if err != nil {
		return nil, err
	}
	if err := f.beforeCommit(ctx, tx); err != nil {
		return nil, err
	}
	committed = true // a failed commit rolls back by itself
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	return removed, nil
}

// inserts returns, for each destination, the statement that inserts the messages of the
// timeouts the forwarding statement removed (the table expression "removed"), in the order
// given, and the statements' bind parameters, numbered from $2.
func (f *ExactlyOnceForwarder) inserts(destinations []string, byDestination map[string][]satellites.Forwarding) ([]string, []any, error) {
	var (
		stmts []string
		args  []any
	)
	for _, dest := range destinations {
		group := byDestination[dest]
		ids := make([]string, len(group))
		uuids := make([]string, len(group))
		payloads := make([][]byte, len(group))
		metadata := make([]string, len(group))
		for i, fw := range group {
			md, err := json.Marshal(fw.Message.Metadata)
			if err != nil {
				return nil, nil, fmt.Errorf("encoding the metadata of message %s as JSON: %w", fw.Message.UUID, err)
			}
			ids[i], uuids[i], payloads[i], metadata[i] = fw.Timeout.ID, fw.Message.UUID, fw.Message.Payload, string(md)
		}
		n := len(args) + 2
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s ("uuid", "payload", "metadata")
SELECT m.uuid, m.payload, m.metadata::json
FROM unnest($%d::text[], $%d::text[], $%d::bytea[], $%d::text[]) WITH ORDINALITY AS m(id, uuid, payload, metadata, ord)
WHERE m.id IN (SELECT id FROM removed) ORDER BY m.ord`, f.schema.quoted(dest), n, n+1, n+2, n+3))
		args = append(args, ids, uuids, payloads, metadata)
	}
	return stmts, args, nil
}

// sameDatabase reports whether a and b reach one PostgreSQL database: an advisory lock is scoped
// to its database, so a lock a transaction on a holds is refused to b exactly when b is
// connected to the same database, whatever the DSNs look like.
func sameDatabase(ctx context.Context, a, b *sql.DB) (bool, error) {
	if a == b {
		return true, nil
	}
	for range 3 {
		key, err := randomKey()
		if err != nil {
			return false, err
		}
		same, taken, err := probe(ctx, a, b, key)
		if err != nil || !taken {
			return same, err
		}
		// Someone else holds this key: try another.
	}
	return false, errors.New("advisory locks for the check were all taken")
}

// probe takes key through a and tries it through b. taken is true when a could not take it.
func probe(ctx context.Context, a, b *sql.DB, key int64) (same, taken bool, err error) {
	tx, err := a.BeginTx(ctx, nil)
	if err != nil {
		return false, false, err
	}
	defer func() { _ = tx.Rollback() }()
	var got bool
	if err := tx.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock($1)`, key).Scan(&got); err != nil {
		return false, false, err
	}
	if !got {
		return false, true, nil
	}
	// In a statement of its own, b's lock (if it gets it) ends with the statement.
	if err := b.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock($1)`, key).Scan(&got); err != nil {
		return false, false, err
	}
	return !got, false, nil
}

func randomKey() (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[:])), nil
}

// describe names the database db reaches, for an error message, without credentials.
func describe(ctx context.Context, db *sql.DB) string {
	var name, host string
	var port int
	err := db.QueryRowContext(ctx,
		`SELECT current_database(), COALESCE(host(inet_server_addr()), 'a local socket'), COALESCE(inet_server_port(), 0)`).
		Scan(&name, &host, &port)
	if err != nil {
		return "a database that could not be named (" + err.Error() + ")"
	}
	return fmt.Sprintf("database %q at %s port %d", name, host, port)
}
