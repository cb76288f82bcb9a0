package postgres

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// Config configures a Store. Set Endpoint or Table; Open also needs DSN.
type Config struct {
	// DSN is the connection string Open connects with: a URL (postgres://user@host:5432/db) or
	// keyword/value pairs (host=... dbname=...), as pgx reads them. New ignores it.
	DSN string

	// Endpoint is the name of the endpoint whose timeouts the store keeps. It names the table
	// when Table is empty.
	Endpoint string

	// Schema is the schema of the table. Defaults to "public".
	Schema string

	// Table is the table the timeouts are kept in. Defaults to "<Endpoint>.timeouts", the
	// NServiceBus name, as one quoted identifier. Any name of at most 63 bytes of UTF-8 without
	// NUL is safe: it is quoted, never pasted into SQL raw.
	Table string

	// MaxOpenConns bounds the connections Open's pool keeps to the server. Open opens them all
	// before it returns, so that the first burst of due timeouts does not wait while the server
	// starts connections (tens of milliseconds each on a busy server); those the server refuses
	// then are opened when needed. Defaults to 10. New ignores it: the caller's *sql.DB keeps its
	// own limits.
	MaxOpenConns int
}

const (
	defaultSchema       = "public"
	defaultMaxOpenConns = 10
	// maxIdentifierLength is PostgreSQL's NAMEDATALEN-1: longer names are cut silently, which
	// could make two tables one.
	maxIdentifierLength = 63
)

func (c *Config) setDefaults() {
	c.Table = sqlstore.TableName(c.Endpoint, c.Table)
	c.Schema = cmp.Or(c.Schema, defaultSchema)
	c.MaxOpenConns = cmp.Or(c.MaxOpenConns, defaultMaxOpenConns)
}

// Validate reports what is wrong with c. Empty fields are valid where they have defaults.
func (c Config) Validate() error {
	var schema error
	if c.Schema != "" {
		schema = validateIdentifier("Schema", c.Schema)
	}
	return sqlstore.CheckConfig("postgres", sqlstore.TableName(c.Endpoint, c.Table),
		func(table string) error { return validateIdentifier("Table", table) },
		schema, sqlstore.CheckMaxOpenConns(c.MaxOpenConns))
}

func validateIdentifier(field, name string) error {
	switch {
	case len(name) > maxIdentifierLength:
		return fmt.Errorf("%s %q is longer than %d bytes, PostgreSQL's limit for a name (with the default Table, "+
			"Endpoint may have at most %d)", field, name, maxIdentifierLength, maxIdentifierLength-len(".timeouts"))
	case !utf8.ValidString(name):
		return fmt.Errorf("%s %q is not valid UTF-8", field, name)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("%s %q contains a NUL byte", field, name)
	}
	return nil
}

// quoteIdent quotes name as a PostgreSQL identifier, doubling any double quote inside it.
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// indexName names an index of table: "<table>_<suffix>", or when that is longer than a name may
// be, a prefix of table and a hash of all of it, so that names never collide by being cut.
func indexName(table, suffix string) string {
	name := table + "_" + suffix
	if len(name) <= maxIdentifierLength {
		return name
	}
	sum := sha256.Sum256([]byte(table))
	tail := "_" + hex.EncodeToString(sum[:4]) + "_" + suffix
	prefix := table[:maxIdentifierLength-len(tail)]
	for !utf8.ValidString(prefix) { // cut on a character boundary
		prefix = prefix[:len(prefix)-1]
	}
	return prefix + tail
}
