package mysql

import (
	"fmt"
	"time"
)

// datetimeLayout is how DATETIME(6) values are written and read. Times travel as text, so the
// DSN's parseTime and loc, and the session's time_zone, change nothing.
const datetimeLayout = "2006-01-02 15:04:05.999999"

// formatTime writes t in UTC to the microsecond.
func formatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.000000")
}

// readTime reads a DATETIME the store wrote in UTC, whatever the DSN: as text (parseTime off), or
// as a time.Time whose wall clock the driver put in the DSN's loc.
func readTime(v any) (time.Time, error) {
	switch v := v.(type) {
	case time.Time:
		return time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC), nil
	case []byte:
		return parseTime(string(v))
	case string:
		return parseTime(v)
	}
	return time.Time{}, fmt.Errorf("mysql: cannot read %T as a DATETIME", v)
}

func parseTime(s string) (time.Time, error) {
	t, err := time.ParseInLocation(datetimeLayout, s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("mysql: read DATETIME: %w", err)
	}
	return t, nil
}
