// Package connloss tells a failure caused by the connection to a broker or database (closed,
// lost, being made again, refused) from a failure of the work itself (a message the broker
// refuses, a query the database rejects). The dispatch satellite does not count the first kind
// as a forward attempt: the message was never judged, only the road to it was out.
//
// It classifies by type, never by an error's text, except for the one error watermill-amqp
// reports a lost connection with, which has no type (see Is).
package connloss

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/go-sql-driver/mysql"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
)

// ErrConnectionLost marks an error as the connection's doing, for code that knows it is (a
// Publisher of one's own can wrap its errors with it). Is reports true for anything wrapping it.
var ErrConnectionLost = errors.New("connection to the broker or database lost")

// Is reports whether err, or an error it wraps, says that the connection failed rather than the
// work:
//
//   - ErrConnectionLost, and amqpconn.ErrNotConnected (amqptransport and native/rabbitmq wrap
//     it while they connect again);
//   - amqp091-go's ErrClosed ("channel/connection is not open"), and an *amqp.Error for a closed
//     connection: CONNECTION_FORCED (320, a broker stopping or an operator closing it) and
//     FRAME_ERROR (501, which amqp091-go reports when reading from the socket fails). A channel
//     the broker closed for the message's sake (406 PRECONDITION_FAILED for an oversized
//     message, 404 NOT_FOUND) is not the connection's doing;
//   - database/sql's driver.ErrBadConn and sql.ErrConnDone, go-sql-driver/mysql's
//     ErrInvalidConn, a MySQL server shutting down (1053) or killing the connection (1927), and
//     a PostgreSQL error of SQLSTATE class 08 (connection exception) or 57P01-57P03 (the server
//     shutting down or starting);
//   - every net.Error (refused, reset, unreachable, timed out), io.EOF and io.ErrUnexpectedEOF
//     (a socket closed mid-answer), ECONNREFUSED, ECONNRESET and EPIPE;
//   - watermill-amqp's Publisher's "not connected to AMQP", matched by its exact text because
//     that library gives it no type.
//
// A context's cancellation or deadline is not a connection failure: it is the caller's.
func Is(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// context.DeadlineExceeded is a net.Error too, so this comes first.
		return errors.Is(err, ErrConnectionLost)
	}
	if errors.Is(err, ErrConnectionLost) || errors.Is(err, amqpconn.ErrNotConnected) ||
		errors.Is(err, amqp.ErrClosed) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && (amqpErr.Code == amqp.ConnectionForced || amqpErr.Code == amqp.FrameError) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && (myErr.Number == 1053 || myErr.Number == 1927) {
		return true
	}
	var stateErr interface{ SQLState() string } // *pgconn.PgError, without importing pgx here
	if errors.As(err, &stateErr) {
		state := stateErr.SQLState()
		if len(state) == 5 && (state[:2] == "08" || state == "57P01" || state == "57P02" || state == "57P03") {
			return true
		}
	}
	return anyError(err, func(e error) bool { return e.Error() == watermillAMQPNotConnected })
}

// watermillAMQPNotConnected is what watermill-amqp's Publisher.Publish returns, as a plain
// errors.New, while it connects again (watermill-amqp v3.1.0, pkg/amqp/publisher.go).
const watermillAMQPNotConnected = "not connected to AMQP"

// anyError reports whether match holds for err or any error in its tree.
func anyError(err error, match func(error) bool) bool {
	if err == nil {
		return false
	}
	if match(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return anyError(u.Unwrap(), match)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if anyError(e, match) {
				return true
			}
		}
	}
	return false
}
