package sqltransport

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{Dialect: PostgreSQL, DSN: "postgres://u@h/db"}
	c.setDefaults()
	require.NoError(t, c.Validate())
	require.Equal(t, defaultTablePrefix, c.TablePrefix)
	require.Equal(t, 100*time.Millisecond, c.PollInterval)
	require.Equal(t, 10, c.BatchSize)
	require.Equal(t, 1, c.Consumers)
	require.Equal(t, 30*time.Second, c.AckDeadline)
	require.Equal(t, time.Second, c.ResendInterval)
	require.Equal(t, time.Second, c.RetryInterval)
	require.Equal(t, 10, c.MaxOpenConns)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := []Config{
		{Dialect: PostgreSQL, DSN: "host=127.0.0.1 dbname=x"},
		{Dialect: PostgreSQL, DB: &sql.DB{}, Schema: `odd "schema"; --`},
		{Dialect: MySQL, DSN: "u:p@tcp(127.0.0.1:3306)/db"},
		{Dialect: MySQL, DSN: "u:p@tcp(h)/db", TablePrefix: "q_", Consumers: 64, BatchSize: 1000},
	}
	for _, c := range valid {
		c.setDefaults()
		require.NoError(t, c.Validate(), "%+v", c)
	}
	refused := map[string]Config{
		"Dialect is required":          {DSN: "postgres://u@h/db"},
		`unknown Dialect "sqlite"`:     {Dialect: "sqlite", DSN: "x"},
		"DSN or DB is required":        {Dialect: PostgreSQL},
		"set DSN or DB, not both":      {Dialect: PostgreSQL, DSN: "postgres://h/db", DB: &sql.DB{}},
		"not a go-sql-driver/mysql":    {Dialect: MySQL, DSN: "mysql://u:topsecret@h/db"},
		"Schema is for PostgreSQL":     {Dialect: MySQL, DSN: "u:p@tcp(h)/db", Schema: "s"},
		"Schema":                       {Dialect: PostgreSQL, DSN: "x", Schema: strings.Repeat("s", 64)},
		"TablePrefix":                  {Dialect: PostgreSQL, DSN: "x", TablePrefix: `a"b`},
		"at most 32 bytes":             {Dialect: PostgreSQL, DSN: "x", TablePrefix: strings.Repeat("p", 33)},
		"PollInterval must be":         {Dialect: PostgreSQL, DSN: "x", PollInterval: -1},
		"BatchSize must be positive":   {Dialect: PostgreSQL, DSN: "x", BatchSize: -1},
		"BatchSize must be at most":    {Dialect: PostgreSQL, DSN: "x", BatchSize: 1001},
		"Consumers must be positive":   {Dialect: PostgreSQL, DSN: "x", Consumers: -1},
		"Consumers must be at most 64": {Dialect: PostgreSQL, DSN: "x", Consumers: 65},
		"AckDeadline":                  {Dialect: PostgreSQL, DSN: "x", AckDeadline: -1},
		"ResendInterval":               {Dialect: PostgreSQL, DSN: "x", ResendInterval: -1},
		"RetryInterval":                {Dialect: PostgreSQL, DSN: "x", RetryInterval: -1},
		"MaxOpenConns":                 {Dialect: PostgreSQL, DSN: "x", MaxOpenConns: -1},
	}
	for want, c := range refused {
		c.setDefaults()
		err := c.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig, want)
		require.ErrorContains(t, err, want)
		require.NotContains(t, err.Error(), "topsecret")
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://app:s3cret@db:5432/x?sslmode=disable": "postgres://app:xxxxx@db:5432/x?sslmode=disable",
		"postgres://app@db/x":                             "postgres://app@db/x",
		"app:hunter2@tcp(127.0.0.1:3306)/db":              "app:xxxxx@tcp(127.0.0.1:3306)/db",
		"app@tcp(127.0.0.1:3306)/db":                      "app@tcp(127.0.0.1:3306)/db",
		"host=db password=hunter2 dbname=x":               "host=db password=xxxxx dbname=x",
		"host=db password='with space' dbname=x":          "host=db password=xxxxx dbname=x",
	} {
		require.Equal(t, want, redact(in), in)
	}
}

func TestNewRefusesABadConfigWithoutThePassword(t *testing.T) {
	t.Parallel()
	_, _, err := New(t.Context(), Config{Dialect: MySQL, DSN: "mysql://u:topsecret@h/db"}, nil)
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.NotContains(t, err.Error(), "topsecret")
}

func TestUnreachableDatabaseSaysWhereWithoutThePassword(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{Dialect: PostgreSQL, DSN: "postgres://app:topsecret@127.0.0.1:1/x?connect_timeout=2"},
		{Dialect: MySQL, DSN: "app:topsecret@tcp(127.0.0.1:1)/x?timeout=2s"},
	} {
		_, err := NewPublisher(t.Context(), c, nil)
		require.Error(t, err)
		require.ErrorContains(t, err, "127.0.0.1:1")
		require.NotContains(t, err.Error(), "topsecret")
		_, err = NewSubscriber(t.Context(), c, nil)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "topsecret")
	}
}
