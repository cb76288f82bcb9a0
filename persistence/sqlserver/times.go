package sqlserver

import (
	"fmt"
	"time"

	"github.com/golang-sql/civil"
)

// maxDateTime2 returns the last instant datetime2 holds, to the microsecond.
func maxDateTime2() time.Time {
	return time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
}

// dateTime2 returns t in UTC as go-mssqldb sends a datetime2(7): a civil.DateTime goes with
// exactly its fields, whatever the DSN's timezone setting, where a time.Time would go as a
// datetimeoffset that the server would have to convert before it compares it with the column.
// Times past datetime2's end are sent as its end (a lease that runs past the year 9999), to the
// microsecond like every time the store writes.
func dateTime2(t time.Time) civil.DateTime {
	t = t.UTC()
	if last := maxDateTime2(); t.After(last) {
		t = last
	}
	return civil.DateTimeOf(t)
}

// roundUpMicro rounds t up to whole microseconds, in UTC, so a timeout is never claimed early.
func roundUpMicro(t time.Time) time.Time {
	t = t.UTC()
	if t.Nanosecond()%1000 != 0 {
		t = t.Truncate(time.Microsecond).Add(time.Microsecond)
	}
	return t
}

// utcTime scans a datetime2 the store wrote in UTC. go-mssqldb reads a datetime2 as a time.Time
// with its fields in the DSN's timezone (UTC unless set): the fields are kept, in UTC.
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
	}
	return fmt.Errorf("sqlserver: cannot read %T as a datetime2", v)
}
