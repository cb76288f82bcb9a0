package wire

import "time"

// FormatExpire formats t for HeaderExpire: RFC 3339 in UTC, with as many fractional digits as t
// needs and none for a whole second ("2030-01-02T03:04:05.5Z"). The timeout manager rounds the
// time it reads up to Precision, so a message is never due before t. A time after the year 9999
// cannot be written in RFC 3339; such a header is ErrInvalidHeader on arrival.
//
// A producer that builds a delayed message by hand (another language, a script, a Go program not
// using package timeouts) sets HeaderExpire to FormatExpire(due) and HeaderDestination to the
// topic to deliver to, and publishes the message to TimeoutsQueue(endpoint).
func FormatExpire(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// IsRoutingHeader reports whether key is one of the headers that route a message through the
// timeout manager: HeaderExpire, HeaderDestination, HeaderOwner, HeaderKey, HeaderKeyPolicy and
// Watermill's two delay keys (HeaderWatermillDelayedUntil, HeaderWatermillDelayedFor); and
// HeaderDue, which only delivery sets. The manager removes them all before it stores a timeout,
// so a delivered message carries none of them but HeaderDue, and publishing it again does not
// delay it again. A producer copying a delivered message into a new delayed one leaves them out
// and sets its own.
func IsRoutingHeader(key string) bool {
	switch key {
	case HeaderExpire, HeaderDestination, HeaderOwner, HeaderKey, HeaderKeyPolicy,
		HeaderWatermillDelayedUntil, HeaderWatermillDelayedFor, HeaderDue:
		return true
	}
	return false
}
