package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// scheduleLaps bounds how often one Schedule looks again after its insert found the id or the
// key taken by a concurrent one. Each lap means another Schedule of that key committed, so the
// store as a whole makes progress; the bound only keeps one caller from waiting forever.
const scheduleLaps = 20

// errContended is what Schedule returns when it lost the race for its key scheduleLaps times.
var errContended = errors.New("the id or key was taken by a concurrent Schedule on every attempt")

// Schedule keeps t as Store does and resolves its key by policy against the pending timeout that
// holds it, in one transaction of its own, run again when the database chose it as a deadlock
// victim (Dialect.Retry).
func (s *Store) Schedule(ctx context.Context, t persistence.Timeout, now time.Time, policy persistence.KeyPolicy) (persistence.Scheduled, error) {
	if err := s.checkSchedule(t, policy); err != nil {
		return persistence.Scheduled{}, err
	}
	var out persistence.Scheduled
	run := func(ctx context.Context, q Querier) error {
		var err error
		out, err = s.schedule(ctx, q, t, now, policy)
		return err
	}
	err := s.retry(ctx, func() error {
		if t.Key != "" && s.d.Locks.KeyTx != nil {
			return s.d.Locks.KeyTx(ctx, t.Key, run)
		}
		return s.write(ctx, true, run)
	})
	if err != nil {
		return persistence.Scheduled{}, fmt.Errorf("%s: schedule %q: %w", s.d.Name, t.ID, err)
	}
	return out, nil
}

// ScheduleTx is Schedule inside tx, the caller's transaction on the store's database: the
// timeout exists if and only if tx commits. An error of the database (a deadlock, or a
// serialization failure at REPEATABLE READ or above) is returned, not retried: tx is the
// caller's to roll back and run again. A key or id found taken does not fail tx.
func (s *Store) ScheduleTx(ctx context.Context, tx *sql.Tx, t persistence.Timeout, now time.Time, policy persistence.KeyPolicy) (persistence.Scheduled, error) {
	if err := Opened(s); err != nil {
		return persistence.Scheduled{}, err
	}
	if tx == nil {
		return persistence.Scheduled{}, fmt.Errorf("%s: schedule %q: tx is nil", s.d.Name, t.ID)
	}
	if err := s.checkSchedule(t, policy); err != nil {
		return persistence.Scheduled{}, err
	}
	out, err := s.schedule(ctx, tx, t, now, policy)
	if err != nil {
		return persistence.Scheduled{}, fmt.Errorf("%s: schedule %q in a transaction: %w", s.d.Name, t.ID, err)
	}
	return out, nil
}

func (s *Store) checkSchedule(t persistence.Timeout, policy persistence.KeyPolicy) error {
	if err := Opened(s); err != nil {
		return err
	}
	if err := s.validate(t, false); err != nil {
		return err
	}
	return policy.Validate()
}

// schedule runs Schedule's statements on q, a transaction: an id stored already is Existed; the
// pending holder of the key is kept (Duplicate) or deleted (Replaced); a claimed holder gives its
// key up. The insert skips a taken id or key rather than fail, and then it looks again.
func (s *Store) schedule(ctx context.Context, q Querier, t persistence.Timeout, now time.Time, policy persistence.KeyPolicy) (persistence.Scheduled, error) {
	st := s.st
	now = now.UTC().Truncate(time.Microsecond)
	if t.Key != "" && st.KeyLock.SQL != "" {
		if _, err := q.ExecContext(ctx, st.KeyLock.SQL, st.KeyLock.Args(KeyParams{Key: t.Key})...); err != nil {
			return persistence.Scheduled{}, err
		}
	}
	for range scheduleLaps {
		var one int
		err := queryRow(ctx, q, st.Exists.SQL, st.Exists.Args(IDParams{ID: t.ID}), &one)
		if err == nil {
			return persistence.Scheduled{ID: t.ID, Outcome: persistence.Existed}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return persistence.Scheduled{}, err
		}
		out := persistence.Scheduled{ID: t.ID, Outcome: persistence.Created}
		if t.Key != "" {
			holder, pending, found, err := s.keyHolder(ctx, q, t.Key, now)
			switch {
			case err != nil:
				return persistence.Scheduled{}, err
			case !found:
			case !pending: // being delivered: it keeps no key
				if _, err := s.count(ctx, q, st.DropKey.SQL, st.DropKey.Args(IDParams{ID: holder})); err != nil {
					return persistence.Scheduled{}, err
				}
			case policy == persistence.KeyKeep:
				return persistence.Scheduled{ID: holder, Outcome: persistence.Duplicate}, nil
			default:
				if _, err := s.count(ctx, q, st.Delete.SQL, st.Delete.Args(IDParams{ID: holder})); err != nil {
					return persistence.Scheduled{}, err
				}
				out = persistence.Scheduled{ID: t.ID, Outcome: persistence.Replaced, Replaced: holder}
			}
		}
		n, err := s.count(ctx, q, st.Schedule.SQL, st.Schedule.Args(ScheduleParams{StoreParams: storeParams(t), Key: t.Key}))
		if s.d.Errors.IsDuplicate != nil && s.d.Errors.IsDuplicate(err) {
			n, err = 0, nil
		}
		if err != nil {
			return persistence.Scheduled{}, err
		}
		if n == 1 {
			return out, nil
		}
		// A concurrent Schedule took the id or the key since we looked: look again.
	}
	return persistence.Scheduled{}, errContended
}

// keyHolder finds the timeout holding key, locks it, and says whether it is pending at now.
func (s *Store) keyHolder(ctx context.Context, q Querier, key string, now time.Time) (id string, pending, found bool, err error) {
	due, available := s.timeValue(), s.timeValue()
	err = queryRow(ctx, q, s.st.KeyHolder.SQL, s.st.KeyHolder.Args(KeyParams{Key: key}), &id, due, available)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, false, nil
	}
	if err != nil {
		return "", false, false, err
	}
	return id, available.t.Equal(due.t) || !available.t.After(now), true, nil
}

// Reschedule moves the due time of the timeout with that id, pending at now, to due.
func (s *Store) Reschedule(ctx context.Context, id string, due, now time.Time) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	if err := persistence.ValidateDue(due); err != nil {
		return false, err
	}
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("%s: reschedule %q: %w", s.d.Name, id, err)
		}
		if !s.d.Check.Storable(id) {
			return false, nil
		}
	}
	n, err := s.writeCount(ctx, s.st.Reschedule.SQL, s.st.Reschedule.Args(RescheduleParams{
		ID: id, Due: RoundUpMicro(due), Now: now.UTC().Truncate(time.Microsecond),
	}))
	if err != nil {
		return false, fmt.Errorf("%s: reschedule %q: %w", s.d.Name, id, err)
	}
	return n > 0, nil
}
