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

// roundUpMicro rounds t up to whole microseconds, in UTC, so a timeout is never claimed early.
func roundUpMicro(t time.Time) time.Time {
	t = t.UTC()
	if t.Nanosecond()%1000 != 0 {
		t = t.Truncate(time.Microsecond).Add(time.Microsecond)
	}
	return t
}

// utcTime scans a DATETIME the store wrote in UTC, whatever the DSN: as text (parseTime off), or
// as a time.Time whose wall clock the driver put in the DSN's loc.
type utcTime struct {
	Time  time.Time
	Valid bool
}

func (u *utcTime) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*u = utcTime{}
		return nil
	case time.Time:
		*u = utcTime{Valid: true, Time: time.Date(v.Year(), v.Month(), v.Day(),
			v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC)}
		return nil
	case []byte:
		return u.parse(string(v))
	case string:
		return u.parse(v)
	}
	return fmt.Errorf("mysql: cannot read %T as a DATETIME", v)
}

func (u *utcTime) parse(s string) error {
	t, err := time.ParseInLocation(datetimeLayout, s, time.UTC)
	if err != nil {
		return fmt.Errorf("mysql: read DATETIME: %w", err)
	}
	*u = utcTime{Time: t, Valid: true}
	return nil
}
