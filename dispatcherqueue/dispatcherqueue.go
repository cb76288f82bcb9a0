// Package dispatcherqueue is the format of an endpoint's TimeoutsDispatcher queue
// (wire.DispatcherQueue), for producers and consumers other than timeoutmill's own poller and
// dispatch satellite: docs/wire.md ("The dispatcher queue") documents it for other languages.
//
// A message carries the ids of due timeouts as its payload, each UTF-8, at most
// persistence.MaxIDLength bytes, without control characters:
//
//   - without HeaderDispatchIDs, the payload is one id (the original format, which older
//     pollers and other producers write);
//   - with it, the payload is that many ids (1 to MaxIDsPerMessage), each ended by a line feed.
//
// An optional HeaderDispatchAt says by when every id of the message is due. Encode writes a
// message, Decode and DueBy read one.
//
// An older dispatch satellite, which knows only the first format, reads a many-id payload as an
// id containing a control character and sends the message to the error queue: its timeouts stay
// in the store and are claimed again when their lease ends, late but not lost. The poller
// therefore writes many ids per message only as far as timeouts.Config.AnnouncementIDs says.
//
// # Stability
//
// The format is part of the wire contract (docs/wire.md): a reader accepts every format a
// released writer wrote, and a new format is written only behind a setting, as
// timeouts.Config.AnnouncementIDs was. The Go API is stable as timeouts' is: at v0 an
// incompatible change comes only with an entry marked Breaking in CHANGELOG.md and its migration.
package dispatcherqueue

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// ErrMalformed is returned by Decode for a message that does not carry usable timeout ids.
var ErrMalformed = errors.New("dispatcherqueue: malformed message")

// MaxIDsPerMessage bounds the ids one dispatcher message may carry.
const MaxIDsPerMessage = 1000

// Headers of a dispatcher message.
const (
	// HeaderDispatchIDs marks a dispatcher message that carries many timeout ids: its value is
	// their count (a decimal integer), and the payload holds that many ids, each ended by a line
	// feed. A message without it carries one id, the whole payload.
	HeaderDispatchIDs = "dispatch.ids"

	// HeaderDispatchAt is the time (RFC 3339, fractional seconds allowed) by which every id the
	// message carries is due. A poller announces a claim a little before it, and the dispatch
	// satellite waits until then before it looks the ids up, so that the announcement's trip is
	// off the path from due to delivery. Optional: without it the ids are dispatched at once.
	HeaderDispatchAt = "dispatch.at"
)

// Encode returns the message that announces the timeout ids as due: the one-id format for one
// id, otherwise the many-id format with HeaderDispatchIDs. It takes 1 to MaxIDsPerMessage ids,
// each a timeout id (persistence.MaxIDLength bytes at most, UTF-8, no control characters), and
// does not check them: Decode refuses a message that breaks those rules.
func Encode(ids ...string) *message.Message {
	if len(ids) == 1 {
		return message.NewMessage(watermill.NewUUID(), []byte(ids[0]))
	}
	n := 0
	for _, id := range ids {
		n += len(id) + 1
	}
	payload := make([]byte, 0, n)
	for _, id := range ids {
		payload = append(payload, id...)
		payload = append(payload, '\n')
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.Metadata.Set(HeaderDispatchIDs, strconv.Itoa(len(ids)))
	return msg
}

// Decode returns the timeout ids a dispatcher message carries: one, or, with
// HeaderDispatchIDs, as many as that header says.
func Decode(msg *message.Message) ([]string, error) {
	count, batch := msg.Metadata[HeaderDispatchIDs]
	if !batch {
		id := string(msg.Payload)
		if id == "" {
			return nil, fmt.Errorf("%w: empty payload, expected a timeout id", ErrMalformed)
		}
		if err := checkID(id); err != nil {
			return nil, err
		}
		return []string{id}, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || n > MaxIDsPerMessage {
		return nil, fmt.Errorf("%w: %s %q is not a count of ids from 1 to %d", ErrMalformed, HeaderDispatchIDs, count, MaxIDsPerMessage)
	}
	payload := msg.Payload
	if !bytes.HasSuffix(payload, []byte{'\n'}) {
		return nil, fmt.Errorf("%w: a payload of %s ids must end with a line feed", ErrMalformed, count)
	}
	if got := bytes.Count(payload, []byte{'\n'}); got != n {
		return nil, fmt.Errorf("%w: %s says %d ids, the payload holds %d", ErrMalformed, HeaderDispatchIDs, n, got)
	}
	ids := strings.Split(string(payload[:len(payload)-1]), "\n")
	for i, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("%w: id %d of %d is empty", ErrMalformed, i+1, n)
		}
		if err := checkID(id); err != nil {
			return nil, fmt.Errorf("id %d of %d: %w", i+1, n, err)
		}
	}
	return ids, nil
}

// DueBy returns the time by which the ids msg carries are due (HeaderDispatchAt), or ok ==
// false when the message does not say. A value that is not an RFC 3339 time is ErrMalformed.
func DueBy(msg *message.Message) (at time.Time, ok bool, err error) {
	value, ok := msg.Metadata[HeaderDispatchAt]
	if !ok {
		return time.Time{}, false, nil
	}
	at, err = wireparse.ParseTime(value)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: %s: %w", ErrMalformed, HeaderDispatchAt, err)
	}
	return at, true, nil
}

// checkID checks one id read from a payload.
func checkID(id string) error {
	switch {
	case len(id) > persistence.MaxIDLength:
		return fmt.Errorf("%w: payload of %d bytes is longer than a timeout id (%d)", ErrMalformed, len(id), persistence.MaxIDLength)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: payload is not valid UTF-8", ErrMalformed)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: payload %q contains a control character", ErrMalformed, id)
		}
	}
	return nil
}
