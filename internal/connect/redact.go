package connect

import (
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// redactedPassword stands in for a password in anything shown to a person.
const redactedPassword = "xxxxx"

// passwordPattern finds "user:password@" in text that is not a parsable URL, such as a
// go-sql-driver DSN ("user:pass@tcp(host:3306)/db") or an error quoting one.
var passwordPattern = regexp.MustCompile(`([A-Za-z0-9+.\-]*://)?([^:@/\s"'(]+):([^@\s"']*)@`)

// Redact returns dsn with its password replaced, for errors, logs and output.
func Redact(dsn string) string {
	if urls := amqpconn.SplitURLs(dsn); len(urls) > 1 {
		return amqpconn.Redact(dsn) // the nodes of a RabbitMQ cluster
	}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redactedPassword)
			return u.String()
		}
		return dsn
	}
	return passwordPattern.ReplaceAllString(dsn, "${1}${2}:"+redactedPassword+"@")
}

// RedactError returns err with every appearance of secret's password in its text replaced, keeping
// it unwrappable.
func RedactError(err error, secret string) error {
	if err == nil {
		return nil
	}
	if urls := amqpconn.SplitURLs(secret); len(urls) > 1 {
		return amqpconn.RedactError(err, secret)
	}
	password := passwordOf(secret)
	text := err.Error()
	if password == "" || !strings.Contains(text, password) {
		return err
	}
	return &redactedError{text: strings.ReplaceAll(text, password, redactedPassword), err: err}
}

type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// passwordOf finds the password in a URL or user:password@ DSN.
func passwordOf(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		p, _ := u.User.Password()
		return p
	}
	if m := passwordPattern.FindStringSubmatch(dsn); m != nil {
		return m[3]
	}
	return ""
}

// ErrUnsupported is returned for a DSN or URL whose scheme timeoutmill does not know, or that
// cannot work for a separate process.
var ErrUnsupported = errors.New("connect: unsupported")

// ErrInvalid is returned for a DSN, URL or name that cannot work however often it is tried.
var ErrInvalid = errors.New("connect: invalid")

// Permanent reports whether err will not go away by trying again: retrying is for unreachable
// servers, not for wrong addresses or a store that was never set up.
func Permanent(err error) bool {
	return errors.Is(err, ErrUnsupported) || errors.Is(err, ErrInvalid) || errors.Is(err, persistence.ErrNotSetUp)
}
