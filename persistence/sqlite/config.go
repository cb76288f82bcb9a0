package sqlite

import (
	"cmp"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
)

// Config configures a Store. The zero value is not usable: set Path (for Open) and Endpoint or
// Table.
type Config struct {
	// Path is the database file, created when missing (unless MustExist). Open requires it; New
	// ignores it.
	Path string

	// Endpoint is the name of the endpoint whose timeouts the store keeps. It names the table
	// when Table is empty.
	Endpoint string

	// Table is the table the timeouts are kept in. Defaults to "<Endpoint>.timeouts", the
	// NServiceBus name, as one quoted identifier. Any name is safe: it is quoted, never pasted
	// into SQL raw.
	Table string

	// Synchronous is SQLite's synchronous setting: "NORMAL" (the default) or "FULL"; "EXTRA" and
	// "OFF" are accepted too. In WAL mode NORMAL survives a crash of the process but may lose the
	// last commits on power loss or an operating system crash; FULL syncs every commit to disk and
	// loses nothing, at a far lower rate of commits. New ignores it.
	Synchronous string

	// BusyTimeout is how long a statement waits for another process's lock on the file before it
	// fails with SQLITE_BUSY. Defaults to 5 s. New ignores it.
	BusyTimeout time.Duration

	// MustExist makes Open and New create nothing: when the file or the table is missing they
	// fail with an error wrapping persistence.ErrNotSetUp that names it, and leave the file as it
	// was. For tools that only look at or cancel timeouts. Defaults to false: both are created.
	MustExist bool
}

const (
	defaultSynchronous = "NORMAL"
	defaultBusyTimeout = 5 * time.Second
)

func (c *Config) setDefaults() {
	c.Table = sqlstore.TableName(c.Endpoint, c.Table)
	c.Synchronous = cmp.Or(c.Synchronous, defaultSynchronous)
	c.BusyTimeout = cmp.Or(c.BusyTimeout, defaultBusyTimeout)
}

// Validate reports what is wrong with c. Empty fields are valid where they have defaults.
func (c Config) Validate() error {
	var synchronous, busy error
	switch strings.ToUpper(c.Synchronous) {
	case "", "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		synchronous = fmt.Errorf("Synchronous must be NORMAL, FULL, EXTRA or OFF, not %q", c.Synchronous)
	}
	if c.BusyTimeout < 0 {
		busy = fmt.Errorf("BusyTimeout cannot be negative (%s)", c.BusyTimeout)
	}
	return sqlstore.CheckConfig("sqlite", sqlstore.TableName(c.Endpoint, c.Table), validateTable, synchronous, busy)
}

// maxTableLength keeps a table name and the index names made from it readable in error messages
// and well inside what any tool handles.
const maxTableLength = 200

func validateTable(table string) error {
	switch {
	case len(table) > maxTableLength:
		return fmt.Errorf("Table %q is longer than %d bytes", table, maxTableLength)
	case !utf8.ValidString(table):
		return fmt.Errorf("Table %q is not valid UTF-8", table)
	case strings.ContainsRune(table, 0):
		return fmt.Errorf("Table %q contains a NUL byte", table)
	case strings.HasPrefix(strings.ToLower(table), "sqlite_"):
		return fmt.Errorf("Table %q starts with sqlite_, which SQLite reserves", table)
	}
	return nil
}

// quoteIdent quotes name as an SQLite identifier, doubling any double quote inside it.
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
