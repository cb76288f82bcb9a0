package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

func TestSagaTimesOutTheUnpaidOrderOnly(t *testing.T) {
	t.Parallel()
	amqpURL := testenv.AMQPURL(t)
	dsn, schema := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, amqpURL, dsn, schema, 1), out.String())
	text := out.String()
	t.Log("\n" + text)
	require.Contains(t, text, "order A-1 paid: 1 payment timeout cancelled")
	require.Contains(t, text, "order B-2 not paid in time")
	require.NotContains(t, text, "order A-1 not paid in time")
	require.NotContains(t, text, "again")
	require.Contains(t, text, "done")
}

// Every message delivered twice: the example counts orders, not deliveries, and says which
// deliveries were second ones.
func TestSagaCountsOrdersNotDeliveries(t *testing.T) {
	t.Parallel()
	amqpURL := testenv.AMQPURL(t)
	dsn, schema := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, amqpURL, dsn, schema, 2), out.String())
	text := out.String()
	t.Log("\n" + text)
	for _, order := range []string{"A-1", "B-2"} {
		require.Equal(t, 1, strings.Count(text, "order "+order+" placed: payment due within"), order)
		require.Equal(t, 1, strings.Count(text, "order "+order+" placed again (at least once): its payment timeout stands"), order)
	}
	require.Equal(t, 1, strings.Count(text, "order A-1 paid: 1 payment timeout cancelled"))
	require.Equal(t, 1, strings.Count(text, "order A-1 paid again (at least once): 0 payment timeout cancelled"))
	require.Equal(t, 1, strings.Count(text, "order B-2 not paid in time: cancelling the order"), "one timeout for B-2, however often it was placed")
	require.NotContains(t, text, "order A-1 not paid in time")
	require.True(t, strings.HasSuffix(text, "done\n"))
}
