package postgres_test

import (
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
		limited := roleDSN(t, dsn, schema, "limited.timeouts", "CONNECTION LIMIT 2")
		store := open(t, postgres.Config{DSN: limited, Schema: schema, Endpoint: "limited", MaxOpenConns: 5})
		require.Equal(t, 2, store.DB().Stats().OpenConnections, "the role may hold 2 connections")
		inserted, err := store.Store(ctx, persistence.Timeout{ID: "a", Destination: "d", Due: time.Now()})
		require.NoError(t, err)
		require.True(t, inserted, "the store works on what it got")
	})
}
