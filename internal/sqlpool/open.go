package sqlpool

import (
	"database/sql"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgresConfig parses dsn as pgx does and gives its connections a dialer with the keepalive
// settings libpq reads from a DSN (see TakeKeepAlive), which pgx would otherwise send to the
// server as session settings, and refuse. Without a connect_timeout, each host of the DSN gets
// DefaultConnectTimeout to connect.
func PostgresConfig(dsn string) (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	keepAlive, err := TakeKeepAlive(cc.RuntimeParams)
	if err != nil {
		return nil, err
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = DefaultConnectTimeout
	}
	cc.DialFunc = keepAlive.Dialer(cc.ConnectTimeout).DialContext
	return cc, nil
}

// MySQLDialer gives cfg a dial function of its own (never one registered with the driver for
// every user of it) with the keepalive settings of cfg.Params (see TakeKeepAlive), which it
// takes out of them. cfg.Timeout, when set, bounds each dial.
func MySQLDialer(cfg *gomysql.Config) error {
	keepAlive, err := TakeKeepAlive(cfg.Params)
	if err != nil {
		return err
	}
	cfg.DialFunc = keepAlive.Dialer(cfg.Timeout).DialContext
	return nil
}

// Open opens a pool on dsn with driverName, "pgx" or "mysql", as sql.Open would, but with the
// keepalive dialer of PostgresConfig or MySQLDialer. It connects to nothing yet.
func Open(driverName, dsn string) (*sql.DB, error) {
	switch driverName {
	case "pgx":
		cc, err := PostgresConfig(dsn)
		if err != nil {
			return nil, err
		}
		return stdlib.OpenDB(*cc), nil
	case "mysql":
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			return nil, err
		}
		if err := MySQLDialer(cfg); err != nil {
			return nil, err
		}
		connector, err := gomysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(connector), nil
	}
	return nil, fmt.Errorf("sqlpool: no keepalive dialer for driver %q", driverName)
}
