package nativedelay

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/wire"
)

// Levels is the number of delay levels: level L delays by 2^L seconds, L = 27 down to 0.
const Levels = 28

// MaxDelaySeconds is the longest delay the levels can express: 28 bits of seconds, 268,435,455 s
// (about 8.5 years).
const MaxDelaySeconds = 1<<Levels - 1

// MaxDelay is MaxDelaySeconds as a duration.
const MaxDelay = MaxDelaySeconds * time.Second

// maxRoutingKey is AMQP's limit on a routing key (a short string).
const maxRoutingKey = 255

// MaxDestinationLength bounds a destination's name: the routing key carries 28 bits as "0." or
// "1." words before it, and AMQP limits a routing key to 255 bytes.
const MaxDestinationLength = maxRoutingKey - 2*Levels

var (
	// ErrDelayTooLong is returned for a delay beyond MaxDelaySeconds.
	ErrDelayTooLong = errors.New("rabbitmq: delay too long")
	// ErrInvalidDestination is returned for a destination that cannot end a routing key or name a
	// binding of the delivery exchange.
	ErrInvalidDestination = errors.New("rabbitmq: invalid destination")
)

// Seconds is the whole number of seconds a delay takes in the levels: the delay rounded up, so a
// message is never delivered early, and 0 for a delay of zero or less (delivered at once). A
// delay beyond MaxDelaySeconds is ErrDelayTooLong.
//
// A part of a second shorter than wire.Precision is not rounded up. Due times are kept to
// wire.Precision, rounded up (timeouts.DeliverAfter, the Watermill delay headers), so a delay of
// whole seconds asked for and published at once comes out up to a microsecond longer than those
// seconds; rounding that up would add a whole second. Dropping it cannot make a message early:
// the broker starts the level's TTL when it has the message, later than the moment the delay was
// measured from by far more than a microsecond.
func Seconds(delay time.Duration) (uint32, error) {
	if delay <= 0 {
		return 0, nil
	}
	s := int64(delay / time.Second)
	if delay%time.Second >= wire.Precision {
		s++
	}
	if s > MaxDelaySeconds {
		return 0, fmt.Errorf("%w: %s (%d s) is longer than the maximum of 268,435,455 s (about 8.5 years) that %d delay levels hold",
			ErrDelayTooLong, delay, s, Levels)
	}
	return uint32(s), nil
}

// Level is the delay level a message delayed by seconds enters at: its highest set bit. It is -1
// for 0 seconds, which go straight to the delivery exchange.
func Level(seconds uint32) int {
	return bits.Len32(seconds) - 1
}

// RoutingKey is the routing key of a message delayed by seconds for destination, as
// NServiceBus.RabbitMQ v2 builds it: the 28 bits of seconds, most significant first, each a word
// of its own ("0" or "1"), then the destination: a delay of 5 s for "orders" is
// 0.0.(25 more zeros).1.0.1.orders. seconds must not exceed MaxDelaySeconds.
func RoutingKey(seconds uint32, destination string) (string, error) {
	if seconds > MaxDelaySeconds {
		return "", fmt.Errorf("%w: %d s is longer than the maximum of 268,435,455 s", ErrDelayTooLong, seconds)
	}
	if err := ValidateDestination(destination); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(2*Levels + len(destination))
	for level := Levels - 1; level >= 0; level-- {
		b.WriteByte('0' + byte(seconds>>level&1))
		b.WriteByte('.')
	}
	b.WriteString(destination)
	return b.String(), nil
}

// ParseRoutingKey reverses RoutingKey.
func ParseRoutingKey(key string) (seconds uint32, destination string, err error) {
	if len(key) <= 2*Levels {
		return 0, "", fmt.Errorf("%w: routing key %q is shorter than %d bits and a destination", ErrInvalidDestination, key, Levels)
	}
	for i := 0; i < Levels; i++ {
		bit, dot := key[2*i], key[2*i+1]
		if bit != '0' && bit != '1' || dot != '.' {
			return 0, "", fmt.Errorf("%w: routing key %q does not start with %d bits", ErrInvalidDestination, key, Levels)
		}
		seconds = seconds<<1 | uint32(bit-'0')
	}
	destination = key[2*Levels:]
	if err := ValidateDestination(destination); err != nil {
		return 0, "", err
	}
	return seconds, destination, nil
}

// ValidateDestination checks that destination can end a routing key and name a queue bound to
// the delivery exchange: not empty, valid UTF-8 without control characters, at most
// MaxDestinationLength bytes, and no dot-separated word that is "*" or "#" (in the destination's
// binding, DestinationBindingKey, such a word would be a wildcard and catch other destinations'
// messages).
func ValidateDestination(destination string) error {
	switch {
	case destination == "":
		return fmt.Errorf("%w: the destination is empty", ErrInvalidDestination)
	case len(destination) > MaxDestinationLength:
		return fmt.Errorf("%w: %q is longer than %d bytes (a routing key holds 255: %d for the delay bits, the rest for the destination)",
			ErrInvalidDestination, destination, MaxDestinationLength, 2*Levels)
	case !utf8.ValidString(destination):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidDestination, destination)
	}
	for _, r := range destination {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q contains a control character", ErrInvalidDestination, destination)
		}
	}
	for _, word := range strings.Split(destination, ".") {
		if word == "*" || word == "#" {
			return fmt.Errorf("%w: %q has a word %q, which a topic binding reads as a wildcard", ErrInvalidDestination, destination, word)
		}
	}
	return nil
}
