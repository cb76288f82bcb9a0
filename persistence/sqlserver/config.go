package sqlserver

import (
	"cmp"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// Config configures a Store. Set Endpoint or Table; Open also needs DSN.
type Config struct {
	// DSN is the connection string Open connects with, in any form go-mssqldb reads: a URL
	// (sqlserver://user:password@host:1433?database=app), ADO key=value pairs
	// (server=host;user id=user;password=...;database=app) or odbc:.... Without a database it
	// names, tables go in the login's default database. New ignores it. Errors and String never
	// show its passwords.
	DSN string

	// Endpoint is the name of the endpoint whose timeouts the store keeps. It names the table
	// when Table is empty.
	Endpoint string

	// Schema is the schema of the table. Defaults to "dbo", as the seed's store does.
	Schema string

	// Table is the table the timeouts are kept in. Defaults to "<Endpoint>.timeouts", the
	// NServiceBus name, as one bracketed identifier. Any name SQL Server can hold is safe (at
	// most 128 UTF-16 code units, no NUL, not ending in a space, not starting with #): it is
	// quoted, never pasted into SQL raw.
	Table string

	// MaxOpenConns bounds the connections Open's pool keeps to the server. Defaults to 10. New
	// ignores it: the caller's *sql.DB keeps its own limits.
	MaxOpenConns int
}

const (
	defaultSchema       = "dbo"
	defaultMaxOpenConns = 10
	// maxIdentifierLength is SQL Server's limit for a name (sysname is nvarchar(128)), in UTF-16
	// code units.
	maxIdentifierLength = 128
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
	return sqlstore.CheckConfig("sqlserver", sqlstore.TableName(c.Endpoint, c.Table), validateTable,
		schema, sqlstore.CheckMaxOpenConns(c.MaxOpenConns))
}

// validateTable refuses what validateIdentifier refuses, and a name SQL Server would take for a
// temporary table.
func validateTable(table string) error {
	if err := validateIdentifier("Table", table); err != nil {
		return err
	}
	if strings.HasPrefix(table, "#") {
		return fmt.Errorf("Table %q starts with #, which would make it a temporary table", table)
	}
	return nil
}

// String shows c with the DSN's passwords replaced, so that a logged Config gives none away.
func (c Config) String() string {
	return fmt.Sprintf("sqlserver.Config{DSN: %q, Endpoint: %q, Schema: %q, Table: %q, MaxOpenConns: %d}",
		redactDSN(c.DSN), c.Endpoint, c.Schema, c.Table, c.MaxOpenConns)
}

// GoString is String, so that %#v gives no password away either.
func (c Config) GoString() string { return c.String() }

// validateIdentifier refuses the names SQL Server cannot hold, or would take for another, with
// a message that says why.
func validateIdentifier(field, name string) error {
	switch {
	case !utf8.ValidString(name):
		// The driver sends SQL as UTF-16: invalid bytes would become U+FFFD, another name.
		return fmt.Errorf("%s %q is not valid UTF-8", field, name)
	case utf16Len(name) > maxIdentifierLength:
		return fmt.Errorf("%s %q is longer than %d UTF-16 code units, SQL Server's limit for a name (with the default "+
			"Table, Endpoint may have at most %d)", field, name, maxIdentifierLength, maxIdentifierLength-len(".timeouts"))
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("%s %q contains a NUL character", field, name)
	case strings.HasSuffix(name, " "):
		return fmt.Errorf("%s %q ends with a space, which SQL Server drops from names, so it would name another object", field, name)
	}
	return nil
}

// utf16Len is the length of s in UTF-16 code units, as nvarchar counts it.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// quoteIdent quotes name as a SQL Server delimited identifier, doubling any ] inside it (what
// QUOTENAME does).
func quoteIdent(name string) string {
	return "[" + strings.ReplaceAll(name, "]", "]]") + "]"
}

// quoteString quotes s as a T-SQL Unicode string literal, doubling any ' inside it. T-SQL has no
// other escapes in a literal.
func quoteString(s string) string {
	return "N'" + strings.ReplaceAll(s, "'", "''") + "'"
}
