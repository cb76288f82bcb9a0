package amqpconn

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"amqp://guest:guest@127.0.0.1:5682/":        "amqp://guest:xxxxx@127.0.0.1:5682/",
		"amqps://u:p%40ss@host/vh":                  "amqps://u:xxxxx@host/vh",
		"amqp://host:5672/":                         "amqp://host:5672/",
		"amqp://user@host/":                         "amqp://user@host/",
		"amqp://user:pa#ss@host/":                   "amqp://user:xxxxx@host/",
		"amqp://user:pa/ss@host/vhost":              "amqp://user:xxxxx@host/vhost",
		"postgres://u:secret@db:5432/x?ssl=disable": "postgres://u:xxxxx@db:5432/x?ssl=disable",
		"amqp://u:one@h1/,amqp://u:two@h2/":         "amqp://u:xxxxx@h1/,amqp://u:xxxxx@h2/",
	} {
		got := Redact(in)
		require.Equal(t, want, got, in)
	}
}

func TestRedactError(t *testing.T) {
	t.Parallel()
	cause := errors.New(`dial "amqp://u:topsecret@h/": refused; password topsecret`)
	err := RedactError(cause, "amqp://u:topsecret@h/")
	require.ErrorIs(t, err, cause)
	require.False(t, strings.Contains(err.Error(), "topsecret"), err.Error())
	require.Nil(t, RedactError(nil, "amqp://u:p@h/"))
	require.Same(t, cause, RedactError(cause, "amqp://h/"), "nothing to hide")

	nodes := "amqp://u:first@h1/,amqp://u:second@h2/"
	cause = errors.New("h1: refused (first); h2: refused (second)")
	err = RedactError(cause, nodes)
	require.ErrorIs(t, err, cause)
	require.Equal(t, "h1: refused (xxxxx); h2: refused (xxxxx)", err.Error(), "each node's password")
}
