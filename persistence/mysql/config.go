package mysql

import (
	"cmp"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// Config configures a Store. Set Endpoint or Table; Open also needs DSN.
type Config struct {
	// DSN is the go-sql-driver/mysql data source name Open connects with, such as
	// "user:password@tcp(127.0.0.1:3306)/database". It must name a database. New ignores it.
	DSN string

	// Endpoint is the name of the endpoint whose timeouts the store keeps. It names the table
	// when Table is empty.
	Endpoint string

	// Table is the table the timeouts are kept in, in the DSN's database. Defaults to
	// "<Endpoint>.timeouts", the NServiceBus name, as one quoted identifier. Any name MariaDB can
	// hold is safe (at most 64 characters of the Basic Multilingual Plane, no NUL, not ending in a
	// space): it is quoted, never pasted into SQL raw. MariaDB also keeps each table in a file
	// named after it, where a character other than an ASCII letter, digit or _ takes 3 to 5
	// bytes; SetupInfrastructure fails with "File name too long" past 255.
	Table string

	// MaxOpenConns bounds the connections Open's pool keeps to the server. Open opens them all
	// before it returns, so that the first burst of due timeouts does not wait while the server
	// starts connections (tens of milliseconds each on a busy server); those the server refuses
	// then are opened when needed. Defaults to 10. New ignores it: the caller's *sql.DB keeps its
	// own limits.
	MaxOpenConns int
}

const (
	defaultMaxOpenConns = 10
	// maxIdentifierLength is MariaDB's and MySQL's limit for a table name, in characters.
	maxIdentifierLength = 64
)

func (c *Config) setDefaults() {
	c.Table = sqlstore.TableName(c.Endpoint, c.Table)
	c.MaxOpenConns = cmp.Or(c.MaxOpenConns, defaultMaxOpenConns)
}

// Validate reports what is wrong with c. Empty fields are valid where they have defaults.
func (c Config) Validate() error {
	return sqlstore.CheckConfig("mysql", sqlstore.TableName(c.Endpoint, c.Table), validateTable,
		sqlstore.CheckMaxOpenConns(c.MaxOpenConns))
}

// validateTable refuses the names MariaDB and MySQL cannot hold, with a message that says why
// rather than the server's "Incorrect table name".
func validateTable(table string) error {
	switch {
	case !utf8.ValidString(table):
		return fmt.Errorf("Table %q is not valid UTF-8", table)
	case utf8.RuneCountInString(table) > maxIdentifierLength:
		return fmt.Errorf("Table %q is longer than %d characters, MariaDB's limit for a name (with the default Table, "+
			"Endpoint may have at most %d)", table, maxIdentifierLength, maxIdentifierLength-len(".timeouts"))
	case strings.ContainsRune(table, 0):
		return fmt.Errorf("Table %q contains a NUL character", table)
	case strings.HasSuffix(table, " "):
		return fmt.Errorf("Table %q ends with a space, which MariaDB does not allow", table)
	case strings.IndexFunc(table, func(r rune) bool { return r > 0xFFFF }) >= 0:
		return fmt.Errorf("Table %q has a character outside the Basic Multilingual Plane (an emoji?), "+
			"which MariaDB names cannot hold", table)
	}
	return nil
}

// quoteIdent quotes name as a MariaDB/MySQL identifier, doubling any backtick inside it.
func quoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}
