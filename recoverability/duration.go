package recoverability

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidDuration is returned by ParseDuration for text that is not a duration.
var ErrInvalidDuration = errors.New("recoverability: invalid duration")

// ParseDuration parses a duration written either as a Go duration ("10s", "1m30s", "500ms") or
// as a .NET TimeSpan, the form Shuttle configuration files use: [-][d.]hh:mm[:ss[.fffffff]] or
// [-]d:hh:mm:ss[.fffffff] ("00:00:10", "1.02:03:04", "00:00:00.500"). Hours run 0 to 23, minutes
// and seconds 0 to 59. A bare number is refused: .NET reads "10" as ten days, Go as nothing, and
// neither is what a retry schedule means by it. Negative durations parse; callers that need a
// positive one check.
func ParseDuration(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a duration: %w", ErrInvalidDuration, s, err)
	}
	return d, nil
}

// parseDuration returns the reason, in words, when s is not a duration.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return 0, errors.New("it is empty")
	case strings.Contains(s, ":"):
		return parseTimeSpan(s)
	case isDecimal(strings.TrimPrefix(s, "-")):
		return 0, errors.New(`a number needs a unit ("10s") or the TimeSpan form ("00:00:10")`)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New(`write a Go duration such as "10s" or a TimeSpan such as "00:00:10"`)
	}
	return d, nil
}

// maxDays is the largest whole number of days a time.Duration holds (about 292 years).
const maxDays = int64(1<<63-1) / int64(24*time.Hour)

func parseTimeSpan(s string) (time.Duration, error) {
	negative := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	parts := strings.Split(s, ":")
	var days string
	switch len(parts) {
	case 2, 3: // [d.]hh:mm[:ss[.fffffff]]
		if d, hours, ok := strings.Cut(parts[0], "."); ok {
			days, parts[0] = d, hours
		}
	case 4: // d:hh:mm:ss[.fffffff]
		days, parts = parts[0], parts[1:]
	default:
		return 0, errors.New("a TimeSpan has at most four parts, d:hh:mm:ss")
	}

	var fraction string
	if len(parts) == 3 {
		parts[2], fraction, _ = strings.Cut(parts[2], ".")
	}
	total := time.Duration(0)
	if days != "" {
		n, err := number(days, "days", 8, maxDays)
		if err != nil {
			return 0, err
		}
		total = time.Duration(n) * 24 * time.Hour
	}
	units := []struct {
		name  string
		limit int64
		unit  time.Duration
	}{{"hours", 23, time.Hour}, {"minutes", 59, time.Minute}, {"seconds", 59, time.Second}}
	for i, p := range parts {
		n, err := number(p, units[i].name, 2, units[i].limit)
		if err != nil {
			return 0, err
		}
		total += time.Duration(n) * units[i].unit
	}
	if fraction != "" || strings.HasSuffix(s, ".") {
		if len(fraction) < 1 || len(fraction) > 7 || !isDecimal(fraction) {
			return 0, errors.New("fractions of a second take 1 to 7 digits")
		}
		n, _ := strconv.ParseInt(fraction+strings.Repeat("0", 9-len(fraction)), 10, 64)
		total += time.Duration(n)
	}
	if total < 0 {
		return 0, errors.New("it is longer than Go's largest duration (about 292 years)")
	}
	if negative {
		total = -total
	}
	return total, nil
}

// number parses one TimeSpan component of at most digits decimal digits, 0 to limit.
func number(s, name string, digits int, limit int64) (int64, error) {
	if s == "" || len(s) > digits || !isDecimal(s) {
		return 0, fmt.Errorf("%s must be 1 to %d digits", name, digits)
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	if n > limit {
		return 0, fmt.Errorf("%s must be 0 to %d", name, limit)
	}
	return n, nil
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
