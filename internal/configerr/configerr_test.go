package configerr_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/native/rabbitmq"
	"github.com/timeoutmill/timeoutmill/recoverability"
	"github.com/timeoutmill/timeoutmill/timeouts"
	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
	"github.com/timeoutmill/timeoutmill/transport/sqltransport"
)

func TestEveryPackagesConfigErrorIsOneSentinel(t *testing.T) {
	_, err := amqptransport.NewPublisher(amqptransport.Config{}, nil) // no URL
	require.ErrorIs(t, err, timeouts.ErrInvalidConfig, "a transport's configuration error matches timeouts'")
	for name, sentinel := range map[string]error{
		"timeouts": timeouts.ErrInvalidConfig, "recoverability": recoverability.ErrInvalidConfig,
		"amqptransport": amqptransport.ErrInvalidConfig, "sqltransport": sqltransport.ErrInvalidConfig,
		"rabbitmq": rabbitmq.ErrInvalidConfig,
	} {
		require.True(t, errors.Is(err, sentinel), "%s.ErrInvalidConfig", name)
	}
}
