package sqlstore

import "time"

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
