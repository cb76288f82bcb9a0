package nats

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/wire"
)

var (
	// ErrInvalidID is returned for a message whose UUID cannot name a schedule or travel in a NATS
	// header: empty, longer than MaxIDLength bytes, with a line break, or with a space at either end.
	ErrInvalidID = errors.New("nats: invalid message id")
	// ErrInvalidDestination is returned for a destination that is not a subject a message can be
	// published to (empty, a wildcard, whitespace, an empty token, longer than 250 bytes), that
	// starts with the schedule prefix or "$", or that another stream than the schedule stream
	// captures.
	ErrInvalidDestination = errors.New("nats: invalid destination")
)

// MaxIDLength bounds a message UUID in bytes: it names the schedule's subject.
const MaxIDLength = 512

// idToken is the subject token of the schedule of the message with this id: the id itself when
// it holds only ASCII letters, digits, '-' and '_' (UUIDs, ULIDs), otherwise "~" and the id in
// unpadded base64url. The two forms never meet (base64url has no '~', and a plain id does not
// start with it), so distinct ids never share a schedule, whatever they hold: dots, spaces,
// wildcards, line breaks, any bytes.
func idToken(id string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidID)
	}
	if len(id) > MaxIDLength {
		return "", fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidID, len(id), MaxIDLength)
	}
	if strings.ContainsAny(id, "\r\n") || strings.Trim(id, " \t") != id {
		return "", fmt.Errorf("%w: %q: a NATS header cannot carry a line break, nor spaces at either end", ErrInvalidID, id)
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "~" + base64.RawURLEncoding.EncodeToString([]byte(id)), nil
		}
	}
	return id, nil
}

// validateSubject checks that s is a subject a message can be published to: dot-separated
// non-empty tokens of printable characters, no wildcard, at most wire.MaxDestinationLength bytes.
func validateSubject(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > wire.MaxDestinationLength:
		return fmt.Errorf("%d bytes, at most %d", len(s), wire.MaxDestinationLength)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == utf8.RuneError || r == '\u0085' || r == '\u00a0' {
			return fmt.Errorf("%q holds whitespace or a control character", s)
		}
		if r == '*' || r == '>' {
			return fmt.Errorf("%q holds a wildcard (%q)", s, r)
		}
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return fmt.Errorf("%q has an empty token", s)
		}
	}
	return nil
}

// validateDestination checks that messages can be delivered to destination through the
// schedule stream whose schedules are under prefix.
func validateDestination(destination, prefix string) error {
	if err := validateSubject(destination); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidDestination, err)
	}
	if strings.HasPrefix(destination, "$") {
		return fmt.Errorf("%w: %q: subjects starting with '$' belong to the server", ErrInvalidDestination, destination)
	}
	if destination == prefix || strings.HasPrefix(destination, prefix+".") {
		return fmt.Errorf("%w: %q is under the schedule prefix %q", ErrInvalidDestination, destination, prefix)
	}
	return nil
}
