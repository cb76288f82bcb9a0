package sqltransport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrInvalidTopic is returned for a topic that cannot name a table: empty, or with characters
// other than watermill-sql allows (letters, digits and - $ : . _).
var ErrInvalidTopic = errors.New("sqltransport: invalid topic")

// topicPattern is watermill-sql's rule for topics, which it checks again itself.
var topicPattern = regexp.MustCompile(`^[A-Za-z0-9\-$:._]+$`)

func validateTopic(topic string) error {
	if !topicPattern.MatchString(topic) {
		return fmt.Errorf("%w: %q must be letters, digits and - $ : . _ only, and not empty", ErrInvalidTopic, topic)
	}
	return nil
}

// maxNameLength is the longest table name the dialect keeps whole: PostgreSQL cuts longer names
// silently (NAMEDATALEN-1), which could make two topics one table; MySQL refuses them.
func maxNameLength(d Dialect) int {
	if d == MySQL {
		return 64
	}
	return 63
}

// names makes the table names of topics.
type names struct {
	dialect Dialect
	schema  string // PostgreSQL only; "" for the search_path
	prefix  string
}

// table is the unquoted name of topic's table: prefix+topic, or when that is too long, a cut
// of it and a hash of the whole topic.
func (n names) table(topic string) string {
	name := n.prefix + topic
	if limit := maxNameLength(n.dialect); len(name) > limit {
		sum := sha256.Sum256([]byte(topic))
		tail := "_" + hex.EncodeToString(sum[:4])
		name = name[:limit-len(tail)] + tail
	}
	return name
}

// quoted is topic's table as SQL names it. Validated topics and prefixes hold no quote
// characters; the schema may, and is quoted accordingly.
func (n names) quoted(topic string) string {
	if n.dialect == MySQL {
		return "`" + n.table(topic) + "`"
	}
	t := `"` + n.table(topic) + `"`
	if n.schema != "" {
		t = `"` + strings.ReplaceAll(n.schema, `"`, `""`) + `".` + t
	}
	return t
}

// createTable is the statement that creates topic's table. Its columns are those of
// watermill-sql's PostgreSQLQueueSchema (and of DefaultMySQLSchema, plus acked), with a uuid
// of any length and a binary payload, so watermill-sql's own publishers with those schemas can
// write to it.
func (n names) createTable(topic string) string {
	if n.dialect == MySQL {
		return `CREATE TABLE IF NOT EXISTS ` + n.quoted(topic) + ` (
	` + "`offset`" + ` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	` + "`uuid`" + ` TEXT NOT NULL,
	` + "`payload`" + ` LONGBLOB DEFAULT NULL,
	` + "`metadata`" + ` JSON DEFAULT NULL,
	` + "`acked`" + ` BOOLEAN NOT NULL DEFAULT FALSE,
	` + "`created_at`" + ` TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	}
	return `CREATE TABLE IF NOT EXISTS ` + n.quoted(topic) + ` (
	"offset" BIGSERIAL PRIMARY KEY,
	"uuid" TEXT NOT NULL,
	"payload" BYTEA DEFAULT NULL,
	"metadata" JSON DEFAULT NULL,
	"acked" BOOLEAN NOT NULL DEFAULT FALSE,
	"created_at" TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP
)`
}

// placeholder is the i-th (1-based) bind parameter.
func (n names) placeholder(i int) string {
	if n.dialect == MySQL {
		return "?"
	}
	return fmt.Sprintf("$%d", i)
}

// ident quotes a column name.
func (n names) ident(col string) string {
	if n.dialect == MySQL {
		return "`" + col + "`"
	}
	return `"` + col + `"`
}

// queueSchema is watermill-sql's SchemaAdapter for a queue: each row is one message, handed to
// one consumer. Consumers lock the rows they take with FOR UPDATE SKIP LOCKED in a READ
// COMMITTED transaction, so competing consumers (in one process or many) take different rows
// and never wait for each other; queueOffsets deletes the acked rows in that same transaction.
type queueSchema struct {
	names
	batchSize int
}

var _ wsql.SchemaAdapter = queueSchema{}

// InsertQuery inserts messages in one statement, in order.
func (s queueSchema) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	if len(params.Msgs) == 0 {
		return wsql.Query{}, errors.New("no messages to insert")
	}
	var values strings.Builder
	args := make([]any, 0, 3*len(params.Msgs))
	for i, msg := range params.Msgs {
		metadata, err := json.Marshal(msg.Metadata)
		if err != nil {
			return wsql.Query{}, fmt.Errorf("encoding the metadata of message %s as JSON: %w", msg.UUID, err)
		}
		if i > 0 {
			values.WriteByte(',')
		}
		fmt.Fprintf(&values, "(%s,%s,%s)", s.placeholder(3*i+1), s.placeholder(3*i+2), s.placeholder(3*i+3))
		args = append(args, msg.UUID, []byte(msg.Payload), string(metadata))
	}
	query := fmt.Sprintf("INSERT INTO %s (%s, %s, %s) VALUES %s", s.quoted(params.Topic),
		s.ident("uuid"), s.ident("payload"), s.ident("metadata"), values.String())
	return wsql.Query{Query: query, Args: args}, nil
}

// SelectQuery takes the oldest rows no other consumer holds.
func (s queueSchema) SelectQuery(params wsql.SelectQueryParams) (wsql.Query, error) {
	if params.ConsumerGroup != "" {
		return wsql.Query{}, errors.New("sqltransport queues have no consumer groups")
	}
	return wsql.Query{Query: s.selectQuery(params.Topic)}, nil
}

// selectQuery locks up to batchSize of topic's oldest rows no other consumer holds.
func (s queueSchema) selectQuery(topic string) string {
	acked := "false"
	if s.dialect == MySQL {
		acked = "0"
	}
	return fmt.Sprintf("SELECT %s, %s, %s, %s FROM %s WHERE %s = %s ORDER BY %s LIMIT %d FOR UPDATE SKIP LOCKED",
		s.ident("offset"), s.ident("uuid"), s.ident("payload"), s.ident("metadata"), s.quoted(topic),
		s.ident("acked"), acked, s.ident("offset"), s.batchSize)
}

// probeQuery returns a row when topic's table holds a message not acked, without locking it.
func (s queueSchema) probeQuery(topic string) string {
	acked := "false"
	if s.dialect == MySQL {
		acked = "0"
	}
	return fmt.Sprintf("SELECT 1 FROM %s WHERE %s = %s ORDER BY %s LIMIT 1", s.quoted(topic), s.ident("acked"), acked, s.ident("offset"))
}

// UnmarshalMessage reads a row. It fails only when the row cannot be scanned: metadata that is
// not what Publish writes still makes a message (see decodeMetadata), so that a row written by
// another program can never block the queue.
func (s queueSchema) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var r wsql.Row
	if err := params.Row.Scan(&r.Offset, &r.UUID, &r.Payload, &r.Metadata); err != nil {
		return wsql.Row{}, fmt.Errorf("could not scan message row: %w", err)
	}
	r.Msg = message.NewMessage(string(r.UUID), r.Payload)
	r.Msg.Metadata = decodeMetadata(r.Metadata)
	return r, nil
}

// SchemaInitializingQueries creates the topic's table. The transport runs it itself (see
// tableCache), under a lock, rather than through watermill-sql's schema initialization.
func (s queueSchema) SchemaInitializingQueries(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return []wsql.Query{{Query: s.createTable(params.Topic)}}, nil
}

// SubscribeIsolationLevel is READ COMMITTED: with SKIP LOCKED it neither waits for nor fails on
// rows other consumers took, where REPEATABLE READ would fail with a serialization error on a
// row deleted after its snapshot was taken.
func (s queueSchema) SubscribeIsolationLevel() sql.IsolationLevel { return sql.LevelReadCommitted }

// InvalidMetadataHeader is set, with the reason, on a message whose stored metadata is not a
// JSON object: its headers are lost, so the timeout manager moves such a message to the error
// queue for a person to look at rather than guess.
const InvalidMetadataHeader = "sqltransport.invalid_metadata"

// decodeMetadata reads a metadata column. Publish writes a JSON object of strings; other
// producers may write other JSON values as header values, which become their JSON text (2,
// true), with null as "". A column that is not a JSON object gives InvalidMetadataHeader.
func decodeMetadata(raw []byte) message.Metadata {
	md := message.Metadata{}
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return md
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		md.Set(InvalidMetadataHeader, fmt.Sprintf("the metadata column is not a JSON object: %v", err))
		return md
	}
	for k, v := range fields {
		var s string
		switch {
		case json.Unmarshal(v, &s) == nil:
			md.Set(k, s)
		case string(v) == "null":
			md.Set(k, "")
		default:
			md.Set(k, string(v))
		}
	}
	return md
}

// queueOffsets ends the rows of a batch whose messages were acked: it deletes them on
// PostgreSQL, and marks them acked on MySQL, where purgeAcked deletes them later.
//
// MariaDB (10.11 measured) deadlocks when consumers delete the rows they hold while others take
// rows with FOR UPDATE SKIP LOCKED: a few deadlocks in every few hundred rows, each rolling back
// a batch whose messages were handed out and acked already, so they would be delivered again.
// Marking rows acked instead, and deleting only acked rows below the oldest unacked one, was
// free of them under the same load.
type queueOffsets struct {
	names
}

// ackQuery ends the rows with those offsets, and only those: a batch's rows whose messages were
// not acked (nacked until the subscription stopped, or past AckDeadline) stay, to be handed out
// again.
func (o queueOffsets) ackQuery(topic string, offsets []int64) (string, []any) {
	table := o.quoted(topic)
	if o.dialect == MySQL {
		marks := strings.TrimSuffix(strings.Repeat("?,", len(offsets)), ",")
		args := make([]any, len(offsets))
		for i, off := range offsets {
			args[i] = off
		}
		return fmt.Sprintf("UPDATE %s SET `acked` = TRUE WHERE `offset` IN (%s)", table, marks), args
	}
	return fmt.Sprintf(`DELETE FROM %s WHERE "offset" = ANY($1)`, table), []any{offsets}
}

// purgeLimit bounds the rows one purge statement deletes.
const purgeLimit = 5000

// purgeAcked deletes acked rows of topic's MySQL table below its oldest unacked row, where no
// consumer is taking rows (see queueOffsets), and returns how many it deleted.
func purgeAcked(ctx context.Context, db *sql.DB, n names, topic string) (int64, error) {
	table := n.quoted(topic)
	var below sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT COALESCE(MIN(`offset`), (SELECT MAX(`offset`) + 1 FROM "+table+")) FROM "+table+" WHERE `acked` = FALSE").
		Scan(&below)
	if err != nil || !below.Valid {
		return 0, err
	}
	res, err := db.ExecContext(ctx, "DELETE FROM "+table+" WHERE `offset` < ? AND `acked` = TRUE LIMIT "+fmt.Sprint(purgeLimit), below.Int64)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
