package connloss_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
	"github.com/timeoutmill/timeoutmill/internal/connloss"
)

func TestIs(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("forwarding: %w", err) }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"marked", wrap(connloss.ErrConnectionLost), true},
		{"amqpconn reconnecting", wrap(amqpconn.ErrNotConnected), true},
		{"amqp091 closed", wrap(amqp.ErrClosed), true},
		{"broker shutdown 320", wrap(&amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED"}), true},
		{"socket read failed 501", wrap(&amqp.Error{Code: amqp.FrameError, Reason: "read tcp: connection reset by peer"}), true},
		{"message too large 406", wrap(&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED"}), false},
		{"queue not found 404", wrap(&amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND"}), false},
		{"access refused 403", wrap(&amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED"}), false},
		{"joined", errors.Join(errors.New("first"), amqp.ErrClosed), true},
		{"net dial", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{"refused", wrap(syscall.ECONNREFUSED), true},
		{"reset", wrap(syscall.ECONNRESET), true},
		{"broken pipe", wrap(syscall.EPIPE), true},
		{"eof", wrap(io.ErrUnexpectedEOF), true},
		{"bad conn", wrap(driver.ErrBadConn), true},
		{"conn done", wrap(sql.ErrConnDone), true},
		{"mysql invalid conn", wrap(mysql.ErrInvalidConn), true},
		{"mysql shutdown", wrap(&mysql.MySQLError{Number: 1053, Message: "Server shutdown in progress"}), true},
		{"mysql duplicate key", wrap(&mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}), false},
		{"postgres admin shutdown", wrap(&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}), true},
		{"postgres connection failure", wrap(&pgconn.PgError{Code: "08006"}), true},
		{"postgres unique violation", wrap(&pgconn.PgError{Code: "23505"}), false},
		{"watermill-amqp not connected", wrap(errors.New("not connected to AMQP")), true},
		{"text that merely mentions it", errors.New("we are not connected to AMQP today"), false},
		{"cancelled", wrap(context.Canceled), false},
		{"deadline", wrap(context.DeadlineExceeded), false},
		{"other", errors.New("destination refused the message"), false},
	} {
		require.Equal(t, c.want, connloss.Is(c.err), c.name)
	}
}
