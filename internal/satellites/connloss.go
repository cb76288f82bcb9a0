package satellites

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// connectionLost answers a forward that failed with the connection to the broker or database. The
// connection was closed, lost, or is being made again (see internal/connloss). That says nothing of
// the message: it counts no attempt, whatever NumberOfRetries. It never sends the message to the
// error queue. The dispatch breaker paces the retry (its RetryDelay). It raises a critical error if
// the connection stays away longer than its wait. The dispatcher message is nacked, so the forward
// is tried again once the connection is back.
func (d *Dispatch) connectionLost(ctx context.Context, t persistence.Timeout, cause error) error {
	d.logger.Info("Forwarding a due message failed with the connection; not counted as an attempt, retried when it is back",
		watermill.LogFields{"timeout_id": t.ID, "destination": t.Destination, "error": cause.Error()})
	d.cfg.Breaker.Failure(ctx, cause)
	return fmt.Errorf("forwarding timeout %s to %s (the connection failed, not counted as an attempt): %w", t.ID, t.Destination, cause)
}
