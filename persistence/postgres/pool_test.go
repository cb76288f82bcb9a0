package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/postgres"
)

// TestOpenOpensThePoolWhole: Open starts MaxOpenConns connections, so that the first burst of due
// timeouts finds them rather than waiting while the server starts each one. A server that
// refuses some of them (a role's connection limit here) still gives a working store.
func TestOpenOpensThePoolWhole(t *testing.T) {
	t.Parallel()
	dsn, schema := testenv.PostgresSchema(t)
	ctx := t.Context()

	t.Run("all of them", func(t *testing.T) {
		store := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "warm", MaxOpenConns: 4})
		stats := store.DB().Stats()
		require.Equal(t, 4, stats.OpenConnections, "every connection the pool may keep is open")
		require.Equal(t, 4, stats.Idle, "and idle, for the first calls")
	})

	t.Run("as many as the server allows", func(t *testing.T) {
		owner := open(t, postgres.Config{DSN: dsn, Schema: schema, Endpoint: "limited"})
		require.NoError(t, owner.SetupInfrastructure(ctx))
		role := testenv.UniqueName(t, "tm_role")
		db := openDB(t, dsn)
		for _, stmt := range []string{
			`CREATE ROLE ` + role + ` LOGIN CONNECTION LIMIT 2`,
			`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
			`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + schema + `."limited.timeouts" TO ` + role,
		} {
			_, err := db.ExecContext(ctx, stmt)
			require.NoError(t, err, stmt)
		}
		t.Cleanup(func() {
			for _, stmt := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
				_, err := db.ExecContext(context.Background(), stmt)
				require.NoError(t, err, stmt)
			}
		})
		limited := strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1)
		store := open(t, postgres.Config{DSN: limited, Schema: schema, Endpoint: "limited", MaxOpenConns: 5})
		require.Equal(t, 2, store.DB().Stats().OpenConnections, "the role may hold 2 connections")
		inserted, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()})
		require.NoError(t, err)
		require.True(t, inserted, "the store works on what it got")
	})
}
