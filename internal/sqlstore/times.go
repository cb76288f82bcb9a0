package sqlstore

import (
	"fmt"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// RoundUpMicro rounds t up to whole microseconds, in UTC, so a timeout is never claimed early.
func RoundUpMicro(t time.Time) time.Time {
	t = t.UTC()
	if t.Nanosecond()%1000 != 0 {
		t = t.Truncate(time.Microsecond).Add(time.Microsecond)
	}
	return t
}

// TimeFormat is how a database's driver sends and reads a time.
type TimeFormat int

const (
	// TimeValue sends a time.Time in UTC and reads one back (PostgreSQL, SQL Server).
	TimeValue TimeFormat = iota + 1
	// TimeText sends "2006-01-02 15:04:05.000000" in UTC and reads that text, or a time.Time whose
	// wall clock is UTC whatever its location (MariaDB's DATETIME, whatever the DSN's parseTime
	// and loc).
	TimeText
	// TimeUnixMicro sends and reads microseconds since the Unix epoch (SQLite's INTEGER).
	TimeUnixMicro
)

// datetimeLayout is how TimeText writes and reads a time.
const datetimeLayout = "2006-01-02 15:04:05.999999"

// FormatDatetime writes t in UTC to the microsecond, as TimeText sends it.
func FormatDatetime(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.000000")
}

// time returns t as the binding sends it.
func (b *Binding) time(t time.Time) any {
	t = t.UTC()
	if !b.LastTime.IsZero() && t.After(b.LastTime) {
		t = b.LastTime
	}
	switch b.Times {
	case TimeText:
		return FormatDatetime(t)
	case TimeUnixMicro:
		return t.UnixMicro()
	}
	return t
}

// text returns a string column's value as the binding sends it.
func (b *Binding) text(s string) any {
	if b.BinaryText {
		return []byte(s)
	}
	return s
}

// ReadTime reads a time column's value that is not NULL, as the binding reads it, in UTC.
func (b *Binding) ReadTime(src any) (time.Time, error) {
	switch v := src.(type) {
	case time.Time:
		if b.Times == TimeText { // the wall clock, put in the DSN's loc by the driver, is UTC
			return time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC), nil
		}
		if b.Times == TimeValue {
			return v.UTC(), nil
		}
	case []byte:
		if b.Times == TimeText {
			return parseDatetime(string(v))
		}
	case string:
		if b.Times == TimeText {
			return parseDatetime(v)
		}
	case int64:
		if b.Times == TimeUnixMicro {
			return time.UnixMicro(v).UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("cannot read %T as a time", src)
}

func parseDatetime(s string) (time.Time, error) {
	t, err := time.ParseInLocation(datetimeLayout, s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("read DATETIME: %w", err)
	}
	return t, nil
}

// timeValue scans a time column, NULL or as the dialect reads it.
type timeValue struct {
	read  func(src any) (time.Time, error)
	t     time.Time
	valid bool
}

func (s *Store) timeValue() *timeValue { return &timeValue{read: s.d.Bind.ReadTime} }

// row is what a timeout's columns are scanned into, in one allocation.
type row struct {
	t        persistence.Timeout
	due      timeValue
	metadata []byte
}

func (s *Store) newRow() *row { return &row{due: timeValue{read: s.d.Bind.ReadTime}} }

// finish sets the due time and decodes the metadata scanned.
func (r *row) finish() (err error) {
	r.t.Due = r.due.t
	r.t.Metadata, err = persistence.DecodeMetadata(r.metadata)
	return err
}

func (v *timeValue) Scan(src any) error {
	if src == nil {
		v.t, v.valid = time.Time{}, false
		return nil
	}
	t, err := v.read(src)
	if err != nil {
		return err
	}
	v.t, v.valid = t, true
	return nil
}
