package main

import (
	"bytes"
	"context"
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
	require.NoError(t, run(ctx, &out, amqpURL, dsn, schema), out.String())
	text := out.String()
	t.Log("\n" + text)
	require.Contains(t, text, "order A-1 paid: 1 payment timeout cancelled")
	require.Contains(t, text, "order B-2 not paid in time")
	require.NotContains(t, text, "order A-1 not paid in time")
	require.Contains(t, text, "done")
}
