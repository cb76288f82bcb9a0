package wire

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrInvalidHeader is returned when a contract header is present but unusable. Messages carrying
// one go to the error queue with the error's text as their failure reason.
var ErrInvalidHeader = errors.New("wire: invalid header")

// MaxDestinationLength bounds HeaderDestination; the SQL stores keep destinations in 250 characters.
const MaxDestinationLength = 250

// Precision is the resolution at which timeoutmill keeps due times. Every store keeps at least
// microseconds, so due times are rounded up to it: a message is never due earlier than asked.
const Precision = time.Microsecond

// FormatExpire formats t for HeaderExpire: RFC 3339 in UTC with as many fractional digits as needed.
func FormatExpire(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// ParseExpire parses a HeaderExpire value: RFC 3339, fractional seconds allowed, any offset. The
// result is in UTC and rounded up to Precision.
func ParseExpire(value string) (time.Time, error) {
	if strings.TrimSpace(value) == "" {
		return time.Time{}, fmt.Errorf("%w: %s is empty", ErrInvalidHeader, HeaderExpire)
	}
	t, err := time.Parse(time.RFC3339Nano, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s %q is not an RFC 3339 time: %v", ErrInvalidHeader, HeaderExpire, value, err)
	}
	return RoundUp(t), nil
}

// RoundUp returns t in UTC rounded up to Precision.
func RoundUp(t time.Time) time.Time {
	t = t.UTC()
	if r := t.Truncate(Precision); !r.Equal(t) {
		return r.Add(Precision)
	}
	return t
}

// Due reports when a message with the given headers may be delivered, and whether it carries a
// delay at all. HeaderExpire wins; without it Watermill's HeaderWatermillDelayedUntil is honoured.
//
// Watermill writes its key in whole seconds, truncating the time it was asked for, so taken as it
// stands it would deliver up to a second early. When the value has no fractional part, the due
// time is the later of the value and now plus HeaderWatermillDelayedFor, capped at the end of that
// second (the time asked for lies inside it); without a usable HeaderWatermillDelayedFor it is the
// end of that second. Either way the message is never delivered before the time asked for. now is
// the moment the message is being published or received.
func Due(metadata map[string]string, now time.Time) (due time.Time, delayed bool, err error) {
	if v, ok := metadata[HeaderExpire]; ok {
		due, err := ParseExpire(v)
		return due, err == nil, err
	}
	v, ok := metadata[HeaderWatermillDelayedUntil]
	if !ok {
		return time.Time{}, false, nil
	}
	until, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: %s %q is not an RFC 3339 time: %v", ErrInvalidHeader, HeaderWatermillDelayedUntil, v, err)
	}
	if until.Nanosecond() != 0 {
		return RoundUp(until), true, nil
	}
	endOfSecond := until.Add(time.Second)
	if d, err := time.ParseDuration(metadata[HeaderWatermillDelayedFor]); err == nil {
		due = now.Add(d)
		if due.Before(until) {
			due = until
		}
		if due.After(endOfSecond) {
			due = endOfSecond
		}
		return RoundUp(due), true, nil
	}
	return RoundUp(endOfSecond), true, nil
}

// Destination returns the HeaderDestination of a delayed message, or an error saying why it is
// unusable.
func Destination(metadata map[string]string) (string, error) {
	d, ok := metadata[HeaderDestination]
	switch {
	case !ok:
		return "", fmt.Errorf("%w: %s is missing", ErrInvalidHeader, HeaderDestination)
	case strings.TrimSpace(d) == "":
		return "", fmt.Errorf("%w: %s is empty", ErrInvalidHeader, HeaderDestination)
	case len(d) > MaxDestinationLength:
		return "", fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalidHeader, HeaderDestination, MaxDestinationLength)
	case !utf8.ValidString(d):
		return "", fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidHeader, HeaderDestination)
	}
	for _, r := range d {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%w: %s %q contains a control character", ErrInvalidHeader, HeaderDestination, d)
		}
	}
	return d, nil
}

// IsRoutingHeader reports whether key is one of the headers that route a message through the
// timeout manager: HeaderExpire, HeaderDestination, HeaderOwner and Watermill's two delay keys.
// They are removed before the message is delivered to its destination, which therefore never
// sees a delay header, and a delivered message published again is not delayed again.
func IsRoutingHeader(key string) bool {
	switch key {
	case HeaderExpire, HeaderDestination, HeaderOwner, HeaderWatermillDelayedUntil, HeaderWatermillDelayedFor:
		return true
	}
	return false
}
