package rabbitmq

import (
	"net/url"
	"strings"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
)

// redactText hides rawURL's password in text (dial errors may quote the URL).
func redactText(text, rawURL string) string {
	if urls := amqpconn.SplitURLs(rawURL); len(urls) > 1 {
		for _, u := range urls {
			text = redactText(text, u)
		}
		return text
	}
	if u, err := url.Parse(rawURL); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			return strings.ReplaceAll(text, p, "xxxxx")
		}
	}
	return text
}

// redactError hides rawURL's password in err's text and keeps err for errors.Is and errors.As.
func redactError(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	text := redactText(err.Error(), rawURL)
	if text == err.Error() {
		return err
	}
	return &redactedError{text: text, err: err}
}

type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// where names the broker in errors, without its password.
func where(rawURL string) string { return amqpconn.Redact(rawURL) }
