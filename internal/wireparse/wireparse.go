// Package wireparse reads and writes the headers of the wire contract (package wire): due times
// (HeaderExpire and Watermill's delay headers), destinations, and the names that end up in queue
// names. The timeout manager, its satellites, the Publishers and the transports share it.
package wireparse

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/wire"
)

// ErrOutOfRange is wrapped by the error of a due time after persistence.MaxDue, the end of the
// year 9999: RFC 3339 cannot write it and no store keeps it.
var ErrOutOfRange = errors.New("out of range")

// fiveDigitYear finds a time that time.Parse refuses only for its year's digits.
var fiveDigitYear = regexp.MustCompile(`^\s*\+?[0-9]{5,}-`)

// ParseTime parses an RFC 3339 time a person or another program gave as a due time (a header, a
// flag), fractional seconds allowed, any offset. The result is in UTC and rounded up to
// wire.Precision. A time after the year 9999, written with more digits or reached by its offset
// or by rounding, is refused with ErrOutOfRange.
func ParseTime(value string) (time.Time, error) {
	t, err := parseRFC3339(value)
	if err != nil {
		return time.Time{}, err
	}
	return CheckRange(value, RoundUp(t))
}

// parseRFC3339 parses value as it stands, saying "out of range" for a year of five digits or more.
func parseRFC3339(value string) (time.Time, error) {
	if fiveDigitYear.MatchString(value) {
		return time.Time{}, fmt.Errorf("%q is %w: due times end with the year 9999", value, ErrOutOfRange)
	}
	t, err := time.Parse(time.RFC3339Nano, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time: %v", value, err)
	}
	return t, nil
}

// CheckRange returns t, or ErrOutOfRange when t is after persistence.MaxDue; what names the value
// for the error.
func CheckRange(what string, t time.Time) (time.Time, error) {
	if t.After(persistence.MaxDue) {
		return time.Time{}, fmt.Errorf("%q is %w: due times end with the year 9999", what, ErrOutOfRange)
	}
	return t, nil
}

// FormatExpire is wire.FormatExpire, the one implementation.
func FormatExpire(t time.Time) string { return wire.FormatExpire(t) }

// ParseExpire parses a wire.HeaderExpire value: RFC 3339, fractional seconds allowed, any offset.
// The result is in UTC and rounded up to wire.Precision.
func ParseExpire(value string) (time.Time, error) {
	if strings.TrimSpace(value) == "" {
		return time.Time{}, fmt.Errorf("%w: %s is empty", wire.ErrInvalidHeader, wire.HeaderExpire)
	}
	t, err := ParseTime(value)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s %w", wire.ErrInvalidHeader, wire.HeaderExpire, err)
	}
	return t, nil
}

// RoundUp returns t in UTC rounded up to wire.Precision.
func RoundUp(t time.Time) time.Time {
	t = t.UTC()
	if r := t.Truncate(wire.Precision); !r.Equal(t) {
		return r.Add(wire.Precision)
	}
	return t
}

// Due reports when a message with the given headers may be delivered, and whether it carries a
// delay at all. wire.HeaderExpire wins; without it Watermill's wire.HeaderWatermillDelayedUntil is
// honoured.
//
// Watermill writes its key in whole seconds, truncating the time it was asked for, so taken as it
// stands it would deliver up to a second early. When the value has no fractional part, the due
// time is the later of the value and now plus wire.HeaderWatermillDelayedFor, capped at the end of
// that second (the time asked for lies inside it); without a usable wire.HeaderWatermillDelayedFor
// it is the end of that second. Either way the message is never delivered before the time asked
// for. now is the moment the message is being published or received.
func Due(metadata map[string]string, now time.Time) (due time.Time, delayed bool, err error) {
	if v, ok := metadata[wire.HeaderExpire]; ok {
		due, err := ParseExpire(v)
		return due, err == nil, err
	}
	v, ok := metadata[wire.HeaderWatermillDelayedUntil]
	if !ok {
		return time.Time{}, false, nil
	}
	until, err := parseRFC3339(v)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: %s %w", wire.ErrInvalidHeader, wire.HeaderWatermillDelayedUntil, err)
	}
	due = until
	if until.Nanosecond() == 0 {
		endOfSecond := until.Add(time.Second)
		due = endOfSecond
		if d, err := time.ParseDuration(metadata[wire.HeaderWatermillDelayedFor]); err == nil {
			due = now.Add(d)
			if due.Before(until) {
				due = until
			}
			if due.After(endOfSecond) {
				due = endOfSecond
			}
		}
	}
	due, err = CheckRange(v, RoundUp(due))
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: %s %w", wire.ErrInvalidHeader, wire.HeaderWatermillDelayedUntil, err)
	}
	return due, true, nil
}

// Destination returns the wire.HeaderDestination of a delayed message, or an error saying why it is
// unusable.
func Destination(metadata map[string]string) (string, error) {
	d, ok := metadata[wire.HeaderDestination]
	switch {
	case !ok:
		return "", fmt.Errorf("%w: %s is missing", wire.ErrInvalidHeader, wire.HeaderDestination)
	case strings.TrimSpace(d) == "":
		return "", fmt.Errorf("%w: %s is empty", wire.ErrInvalidHeader, wire.HeaderDestination)
	case len(d) > wire.MaxDestinationLength:
		return "", fmt.Errorf("%w: %s is longer than %d bytes", wire.ErrInvalidHeader, wire.HeaderDestination, wire.MaxDestinationLength)
	case !utf8.ValidString(d):
		return "", fmt.Errorf("%w: %s is not valid UTF-8", wire.ErrInvalidHeader, wire.HeaderDestination)
	}
	for _, r := range d {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%w: %s %q contains a control character", wire.ErrInvalidHeader, wire.HeaderDestination, d)
		}
	}
	return d, nil
}

// Key returns the deduplication key of a delayed message (wire.HeaderKey, "" for none) and the
// policy of wire.HeaderKeyPolicy, or an error saying why they are unusable.
func Key(metadata map[string]string) (string, persistence.KeyPolicy, error) {
	key, hasKey := metadata[wire.HeaderKey]
	policy, hasPolicy := metadata[wire.HeaderKeyPolicy]
	switch {
	case !hasKey && hasPolicy:
		return "", 0, fmt.Errorf("%w: %s is set without %s", wire.ErrInvalidHeader, wire.HeaderKeyPolicy, wire.HeaderKey)
	case !hasKey:
		return "", persistence.KeyReplace, nil
	case key == "":
		return "", 0, fmt.Errorf("%w: %s is empty", wire.ErrInvalidHeader, wire.HeaderKey)
	case len(key) > persistence.MaxIDLength:
		return "", 0, fmt.Errorf("%w: %s is longer than %d bytes", wire.ErrInvalidHeader, wire.HeaderKey, persistence.MaxIDLength)
	case !utf8.ValidString(key) || strings.ContainsRune(key, 0):
		return "", 0, fmt.Errorf("%w: %s is not valid UTF-8 without NUL bytes", wire.ErrInvalidHeader, wire.HeaderKey)
	}
	switch policy {
	case "", wire.KeyPolicyReplace:
		return key, persistence.KeyReplace, nil
	case wire.KeyPolicyKeep:
		return key, persistence.KeyKeep, nil
	}
	return "", 0, fmt.Errorf("%w: %s %q is neither %q nor %q", wire.ErrInvalidHeader, wire.HeaderKeyPolicy, policy,
		wire.KeyPolicyReplace, wire.KeyPolicyKeep)
}

// IsRoutingHeader is wire.IsRoutingHeader, the one implementation.
func IsRoutingHeader(key string) bool { return wire.IsRoutingHeader(key) }

// ValidateName checks that an endpoint or instance name can be used in queue names: not empty,
// at most 200 bytes, printable, and without whitespace.
func ValidateName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s must not be empty", wire.ErrInvalidName, kind)
	case len(name) > 200:
		return fmt.Errorf("%w: %s is longer than 200 bytes", wire.ErrInvalidName, kind)
	}
	for _, r := range name {
		if r < 0x21 || r == 0x7f || r == 0xfffd {
			return fmt.Errorf("%w: %s %q contains whitespace or a control character", wire.ErrInvalidName, kind, name)
		}
	}
	if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") {
		return fmt.Errorf("%w: %s %q must not start or end with a dot", wire.ErrInvalidName, kind, name)
	}
	return nil
}
