package sqlserver

import "time"

// maxDateTime2 returns the last instant datetime2 holds, to the microsecond.
func maxDateTime2() time.Time {
	return time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
}

// utc returns t as the store sends it: in UTC, which go-mssqldb sends as a datetimeoffset at
// +00:00 (see toDateTime2). Times past datetime2's end are sent as its end (a lease that runs past
// the year 9999), to the microsecond like every time the store writes.
func utc(t time.Time) time.Time {
	t = t.UTC()
	if last := maxDateTime2(); t.After(last) {
		t = last
	}
	return t
}
