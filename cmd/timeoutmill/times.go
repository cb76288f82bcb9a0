package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/connect"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
)

// parseWhen reads a time flag: an RFC 3339 time (fractional seconds and any offset allowed), or a
// duration from now such as 24h or -90m. The result is in UTC, rounded up to the microsecond the
// stores keep. A time after the year 9999 is refused as out of range.
func parseWhen(flag, value string, now time.Time) (time.Time, error) {
	t, err := wireparse.ParseTime(value)
	if err == nil {
		return t, nil
	}
	if errors.Is(err, wireparse.ErrOutOfRange) {
		return time.Time{}, fmt.Errorf("%w: %s %w", connect.ErrInvalid, flag, err)
	}
	if d, derr := time.ParseDuration(value); derr == nil {
		t, err := wireparse.CheckRange(value, wireparse.RoundUp(now.Add(d)))
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: %s %w", connect.ErrInvalid, flag, err)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%w: %s %q is neither an RFC 3339 time (2026-12-31T00:00:00Z) nor a duration from now (24h)",
		connect.ErrInvalid, flag, value)
}

// jsonTime is how --json writes a time: RFC 3339 in UTC with the microseconds the stores keep,
// always six digits, so that every time has the same width and sorts as text.
const jsonTime = "2006-01-02T15:04:05.000000Z07:00"

// formatJSONTime writes t as jsonTime, or nil (JSON null) for the zero time.
func formatJSONTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(jsonTime)
	return &s
}
