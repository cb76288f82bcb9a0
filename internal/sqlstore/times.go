package sqlstore

import (
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

// timeValue scans a time column, NULL or as the dialect reads it.
type timeValue struct {
	read  func(src any) (time.Time, error)
	t     time.Time
	valid bool
}

func (s *Store) timeValue() *timeValue { return &timeValue{read: s.d.ReadTime} }

// row is what a timeout's columns are scanned into, in one allocation.
type row struct {
	t        persistence.Timeout
	due      timeValue
	metadata []byte
}

func (s *Store) newRow() *row { return &row{due: timeValue{read: s.d.ReadTime}} }

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
