// Package connect opens what the timeoutmill command is pointed at: a store from a DSN and a
// transport from a URL. Passwords never appear in its errors (Redact).
package connect

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/mysql"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
)

// StoreSchemes lists the store DSNs OpenStore understands, for help texts.
const StoreSchemes = "sqlite:///path/to/file.db, postgres://user:pass@host:5432/db (a primary and its standbys: postgres://user:pass@h1:5432,h2:5432/db?target_session_attrs=read-write), mysql://user:pass@host:3306/db, sqlserver://user:pass@host:1433?database=db"

// OpenStore opens the store a DSN names for endpoint's timeouts:
//
//	sqlite:///var/lib/timeoutmill/orders.db   (sqlite://relative/path.db also works)
//	postgres://user:pass@host:5432/db?sslmode=disable   (or postgresql://)
//	mysql://user:pass@host:3306/db   (or go-sql-driver's own mysql://user:pass@tcp(host:3306)/db)
//	sqlserver://user:pass@host:1433?database=db   (go-mssqldb's URL form)
//
// It does not create tables (see persistence.Installer), except that an SQLite file is created
// with its table when missing.
func OpenStore(ctx context.Context, dsn, endpoint string) (persistence.Store, error) {
	return openStore(ctx, dsn, endpoint, false)
}

// OpenExistingStore opens the store as OpenStore does, but creates nothing, not even an SQLite
// file: when the endpoint's table (or the SQLite file) is missing it fails with an error wrapping
// persistence.ErrNotSetUp that names it. For commands that only look at or cancel timeouts.
func OpenExistingStore(ctx context.Context, dsn, endpoint string) (persistence.Store, error) {
	store, err := openStore(ctx, dsn, endpoint, true)
	if err != nil {
		return nil, err
	}
	if checker, ok := store.(persistence.SetupChecker); ok {
		if err := checker.CheckInfrastructure(ctx); err != nil {
			_ = store.Close()
			return nil, fmt.Errorf("store %s: %w", Redact(dsn), RedactError(err, dsn))
		}
	}
	return store, nil
}

func openStore(ctx context.Context, dsn, endpoint string, existing bool) (persistence.Store, error) {
	scheme, rest, ok := strings.Cut(dsn, ":")
	if !ok || dsn == "" {
		return nil, fmt.Errorf("%w: store %q: expected one of %s", ErrUnsupported, Redact(dsn), StoreSchemes)
	}
	var (
		store persistence.Store
		err   error
	)
	invalid := func(err error) error {
		return fmt.Errorf("%w: store %s: %w", ErrInvalid, Redact(dsn), RedactError(err, dsn))
	}
	switch strings.ToLower(scheme) {
	case "sqlite":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return nil, fmt.Errorf("%w: store %q: no file path (sqlite:///path/to/file.db)", ErrInvalid, dsn)
		}
		cfg := sqlite.Config{Path: path, Endpoint: endpoint, MustExist: existing}
		if err := cfg.Validate(); err != nil {
			return nil, invalid(err)
		}
		store, err = sqlite.Open(ctx, cfg)
	case "postgres", "postgresql":
		cfg := postgres.Config{DSN: dsn, Endpoint: endpoint}
		if err := cfg.Validate(); err != nil {
			return nil, invalid(err)
		}
		store, err = postgres.Open(ctx, cfg)
	case "mysql", "mariadb":
		driverDSN, err := MySQLDriverDSN(dsn)
		if err != nil {
			return nil, err
		}
		cfg := mysql.Config{DSN: driverDSN, Endpoint: endpoint}
		if err := cfg.Validate(); err != nil {
			return nil, invalid(err)
		}
		store, err = mysql.Open(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("opening store %s: %w", Redact(dsn), RedactError(err, dsn))
		}
	case "sqlserver":
		cfg := sqlserver.Config{DSN: dsn, Endpoint: endpoint}
		if err := cfg.Validate(); err != nil {
			return nil, invalid(err)
		}
		store, err = sqlserver.Open(ctx, cfg)
	default:
		return nil, fmt.Errorf("%w: store scheme %q: expected one of %s", ErrUnsupported, scheme, StoreSchemes)
	}
	if errors.Is(err, persistence.ErrNotSetUp) {
		return nil, fmt.Errorf("store %s: %w", Redact(dsn), RedactError(err, dsn))
	}
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", Redact(dsn), RedactError(err, dsn))
	}
	return store, nil
}

// MySQLDriverDSN turns mysql://user:pass@host:port/db?params into go-sql-driver/mysql's
// user:pass@tcp(host:port)/db?params, with parseTime on. A DSN already in the driver's form after
// the scheme (user:pass@tcp(host:port)/db) is passed through.
func MySQLDriverDSN(dsn string) (string, error) {
	_, rest, _ := strings.Cut(dsn, "://")
	if strings.Contains(rest, "@tcp(") || strings.Contains(rest, "@unix(") || strings.HasPrefix(rest, "tcp(") {
		cfg, err := gomysql.ParseDSN(rest)
		if err != nil {
			return "", fmt.Errorf("%w: mysql DSN %s: %w", ErrInvalid, Redact(dsn), RedactError(err, dsn))
		}
		cfg.ParseTime = true
		return cfg.FormatDSN(), nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("%w: mysql URL %s: %w", ErrInvalid, Redact(dsn), RedactError(err, dsn))
	}
	cfg := gomysql.NewConfig()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if u.Port() == "" {
		cfg.Addr = u.Host + ":3306"
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" {
		return "", fmt.Errorf("%w: mysql URL %s names no database (mysql://user:pass@host:3306/db)", ErrInvalid, Redact(dsn))
	}
	params := u.Query()
	if len(params) > 0 {
		cfg.Params = map[string]string{}
		for k := range params {
			cfg.Params[k] = params.Get(k)
		}
	}
	cfg.ParseTime = true
	delete(cfg.Params, "parseTime")
	return cfg.FormatDSN(), nil
}
