package natstransport

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/connloss"
)

// TestPublishFailuresOfTheConnectionAreConnectionLoss: what a publish returns while the server is
// away (wrapped, as watermill-nats wraps it) reads as the connection's failure, so the dispatch
// satellite retries the forward rather than count it, send it to the error queue or park it; a
// message the server refuses for itself (too large) does not.
func TestPublishFailuresOfTheConnectionAreConnectionLoss(t *testing.T) {
	t.Parallel()
	for _, err := range connectionErrs {
		wrapped := connectionErr(fmt.Errorf("sending message failed: %w", err))
		require.True(t, connloss.Is(wrapped), "%v", err)
		require.ErrorIs(t, wrapped, err, "the cause is kept")
	}
	require.False(t, connloss.Is(connectionErr(fmt.Errorf("sending message failed: %w", nats.ErrMaxPayload))))
	require.NoError(t, connectionErr(nil))
}
