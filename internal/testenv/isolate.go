package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	// The pgx database/sql driver, registered as "pgx".
	_ "github.com/jackc/pgx/v5/stdlib"
)

// maxNameLength fits PostgreSQL's identifiers (63 bytes) and MySQL's (64 characters).
const maxNameLength = 63

// cleanupTimeout bounds the DROP run when a test ends (t.Context is cancelled by then).
const cleanupTimeout = 30 * time.Second

// UniqueName returns a name of t's own that no other test and no other run uses: prefix, then
// t's name, then random hex, in lower-case letters, digits and underscores, at most 63 bytes. It
// is safe to use unquoted as a schema, database or table name.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var random [6]byte
	if _, err := rand.Read(random[:]); err != nil {
		t.Fatalf("testenv: random name: %v", err)
	}
	suffix := "_" + hex.EncodeToString(random[:])
	name := sanitize(prefix + "_" + t.Name())
	if room := maxNameLength - len(suffix); len(name) > room {
		name = name[:room]
	}
	return name + suffix
}

// sanitize lower-cases s and turns every run of other characters than a-z, 0-9 into one '_'.
func sanitize(s string) string {
	var b strings.Builder
	underscore := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	name := strings.Trim(b.String(), "_")
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		name = "t_" + name
	}
	return name
}

// PostgresSchema creates an empty schema of t's own in the test PostgreSQL database and drops it,
// with everything in it, when t ends. It returns the schema's name and a DSN whose connections
// have it as their search_path. Like PostgresDSN, it skips t (fails it under CI) without a server.
func PostgresSchema(t testing.TB) (dsn, schema string) {
	t.Helper()
	base := PostgresDSN(t)
	schema = UniqueName(t, "tm")
	execOn(t, "pgx", base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { execOn(t, "pgx", base, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })

	dsn, err := withSearchPath(base, schema)
	if err != nil {
		t.Fatalf("testenv: %s: %v", PostgresDSNEnv, err)
	}
	return dsn, schema
}

// withSearchPath adds search_path to a URL or keyword/value DSN.
func withSearchPath(dsn, schema string) (string, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " search_path=" + schema, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("parse DSN: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// MySQLDatabase creates an empty database of t's own on the test MariaDB server and drops it when
// t ends. It returns the database's name and a DSN that uses it. Like MySQLDSN, it skips t (fails
// it under CI) without a server.
func MySQLDatabase(t testing.TB) (dsn, database string) {
	t.Helper()
	base := MySQLDSN(t)
	cfg, err := gomysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("testenv: %s: %v", MySQLDSNEnv, err)
	}
	database = UniqueName(t, "tm")
	execOn(t, "mysql", base, "CREATE DATABASE "+database)
	t.Cleanup(func() { execOn(t, "mysql", base, "DROP DATABASE IF EXISTS "+database) })

	cfg.DBName = database
	return cfg.FormatDSN(), database
}

// execOn runs one statement on a connection of its own.
func execOn(t testing.TB, driver, dsn, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("testenv: open %s: %v", driver, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("testenv: %s: %v", stmt, err)
	}
}
