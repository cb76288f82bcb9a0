package sqlstore

import (
	"errors"
	"fmt"
	"strings"
)

// Queries is a backend's SQL, written with named parameters (@name), which Compile rewrites in
// the dialect's Style. Each statement takes exactly the names of its Params (see params.go);
// empty is "none" where the comment says it may be.
type Queries struct {
	// Store inserts a timeout (StoreParams), @due as due and as available_at.
	Store string
	// Next selects the earliest available_at, or NULL.
	Next string
	// Now selects the database's current time in UTC, read when the statement runs (not when a
	// transaction began); empty for a database on the caller's machine (SQLite), whose clock is
	// the caller's. See persistence.Clocked.
	Now string
	// Claim moves up to @limit rows claimable at @now to @until, records @by as their claiming
	// instance, and returns their id and due (ClaimParams).
	Claim string
	// Peek selects destination, due, owner, payload, metadata, failure_count, key (empty for
	// none), parking reason (empty for none) of @id.
	Peek string
	// Delete and IncrementFailureCount change the row of @id.
	Delete, IncrementFailureCount string
	// CancelByOwner deletes the rows of @owner, when it is not empty.
	CancelByOwner string
	// Stats selects the count, how many are due at @now and not parked, how many are claimed at
	// @now and not parked, how many are parked (these three NULL for no rows), the earliest and
	// the latest due time.
	Stats string
	// StatsByDestination selects each destination and its count.
	StatsByDestination string
	// List is what List reads and the columns its filters compare (see ListSQL).
	List ListSQL
	// Exists selects a row when @id is stored, reading the latest committed row even in a
	// REPEATABLE READ transaction.
	Exists string
	// KeyLock, when set, takes a lock on @key until the transaction ends, so that Schedules of
	// one key queue for it rather than race for its row.
	KeyLock string
	// KeyHolder selects id, due, available_at of the row holding @key and locks it until the
	// transaction ends.
	KeyHolder string
	// DropKey sets the key of the row of @id to NULL.
	DropKey string
	// Schedule inserts a timeout as Store does, with @key (NULL for none), and inserts nothing,
	// without failing the transaction, when the id or the key is taken (or fails with an error
	// Errors.IsDuplicate accepts) (ScheduleParams).
	Schedule string
	// Reschedule moves the due time (and available_at) of the row of @id, pending at @now and
	// not parked, to @due.
	Reschedule string
	// Survey selects per destination its count, latest due and hidden count (available_at at
	// or after @hiddenFrom), of the rows due at or after @from, parked rows left out.
	Survey string
	// Hide moves up to @limit rows due at or after @from, not parked, that no poller holds at
	// @now, to @mark, records no claiming instance, and returns them whole (HideParams).
	Hide string
	// Park sets the row of @id aside: available_at to @parkedAt (persistence.MaxDue), @reason,
	// no claiming instance and no key.
	Park string
	// ReleaseClaimsOf moves the rows @instance holds claimed (not parked, not hidden: available_at
	// before @hiddenFrom) back to their due time, with no claiming instance.
	ReleaseClaimsOf string
	// PeekIn (id and the columns of Peek), RemoveIn (returning the ids deleted), ReleaseIn
	// (available_at back to due and no claiming instance, parked rows left alone) and UnparkIn
	// (parked rows back to due, failure count 0, no reason) and DeleteParkedIn (parked rows
	// deleted; a count, as UnparkIn) are made for n ids, with the placeholders Binding.IDs
	// says. They take nothing but the ids.
	PeekIn, RemoveIn, ReleaseIn, UnparkIn, DeleteParkedIn func(n int) string
}

// Statements are a dialect's Queries compiled (see Compile).
type Statements struct {
	Store                                       Stmt[StoreParams]
	Next, Now, StatsByDestination               Stmt[NoParams]
	Claim                                       Stmt[ClaimParams]
	Peek, Delete, IncrementFailureCount, Exists Stmt[IDParams]
	DropKey                                     Stmt[IDParams]
	CancelByOwner                               Stmt[OwnerParams]
	Stats                                       Stmt[NowParams]
	KeyLock, KeyHolder                          Stmt[KeyParams]
	Schedule                                    Stmt[ScheduleParams]
	Reschedule                                  Stmt[RescheduleParams]
	Survey                                      Stmt[SurveyParams]
	Hide                                        Stmt[HideParams]
	Park                                        Stmt[ParkParams]
	ReleaseClaimsOf                             Stmt[InstanceParams]
}

// CompileQueries compiles every statement of q for binding; its error names each statement that
// failed.
func CompileQueries(q Queries, binding *Binding) (*Statements, error) {
	var errs []error
	st := &Statements{
		Store:                 compileAs[StoreParams](&errs, binding, "Store", q.Store),
		Next:                  compileAs[NoParams](&errs, binding, "Next", q.Next),
		Now:                   compileAs[NoParams](&errs, binding, "Now", q.Now),
		StatsByDestination:    compileAs[NoParams](&errs, binding, "StatsByDestination", q.StatsByDestination),
		Claim:                 compileAs[ClaimParams](&errs, binding, "Claim", q.Claim),
		Peek:                  compileAs[IDParams](&errs, binding, "Peek", q.Peek),
		Delete:                compileAs[IDParams](&errs, binding, "Delete", q.Delete),
		IncrementFailureCount: compileAs[IDParams](&errs, binding, "IncrementFailureCount", q.IncrementFailureCount),
		Exists:                compileAs[IDParams](&errs, binding, "Exists", q.Exists),
		DropKey:               compileAs[IDParams](&errs, binding, "DropKey", q.DropKey),
		CancelByOwner:         compileAs[OwnerParams](&errs, binding, "CancelByOwner", q.CancelByOwner),
		Stats:                 compileAs[NowParams](&errs, binding, "Stats", q.Stats),
		KeyLock:               compileAs[KeyParams](&errs, binding, "KeyLock", q.KeyLock),
		KeyHolder:             compileAs[KeyParams](&errs, binding, "KeyHolder", q.KeyHolder),
		Schedule:              compileAs[ScheduleParams](&errs, binding, "Schedule", q.Schedule),
		Reschedule:            compileAs[RescheduleParams](&errs, binding, "Reschedule", q.Reschedule),
		Survey:                compileAs[SurveyParams](&errs, binding, "Survey", q.Survey),
		Hide:                  compileAs[HideParams](&errs, binding, "Hide", q.Hide),
		Park:                  compileAs[ParkParams](&errs, binding, "Park", q.Park),
		ReleaseClaimsOf:       compileAs[InstanceParams](&errs, binding, "ReleaseClaimsOf", q.ReleaseClaimsOf),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return st, nil
}

// compileAs compiles text, and adds its error, named, to errs.
func compileAs[P Params](errs *[]error, binding *Binding, name, text string) Stmt[P] {
	st, err := Compile[P](binding, text)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %w", name, err))
	}
	return st
}

// ListSQL is how List's statement is made: SELECT, the columns and table of From, the filters
// set (each compares one of the columns named here with a parameter), ORDER BY due, id, and the
// limit (LIMIT, or TOP when Top).
type ListSQL struct {
	// From lists id, destination, due, owner, metadata, failure_count, key (empty for none),
	// parking reason (empty for none) and names the table: "id, ... FROM t".
	From string
	// The columns the filters and the order compare; Parked is the parking reason's, NULL for a
	// timeout that is not parked.
	ID, Due, Owner, Destination, Key, Parked string
	// Table is the table From names, for CountDue's statement; empty when the backend has no
	// such statement (CountDue then returns persistence.ErrUnsupported).
	Table string
	// Top limits with SELECT TOP (n) (SQL Server) rather than LIMIT n.
	Top bool
	// TimeParam, when set, wraps a time parameter as the due column compares it.
	TimeParam func(param string) string
}

// Columns lists the columns of a timeout row as Store inserts them, in the tables of the
// backends that name them alike (PostgreSQL, MariaDB, SQLite).
const Columns = "id, destination, due, available_at, owner, payload, metadata, failure_count"

// Standard returns the statements that read and change the table t (quoted) alike in PostgreSQL,
// MariaDB and SQLite; a backend adds Claim and Hide, and what it needs to Store. With Numbered, a
// statement's ids are one array, = ANY($1) (PostgreSQL); otherwise they are a list, IN (?, ?, …).
//
// available_at is when a row can next be claimed: its due time until it is claimed, then the end
// of the claim's lease. Claims and Next use its index, and no watermark is kept, so a timeout
// committed late is still found (NServiceBus#3500). The test that owner is not empty matches the
// partial owner indexes, and keeps "" from meaning "every ownerless timeout".
//
// dedup_key is a timeout's deduplication key, NULL for none, under a unique index: the backend
// makes Schedule's insert skip a taken id or key, and KeyHolder lock the row it finds.
//
// parked_reason is why a timeout was parked, NULL when it is not: a parked row's available_at is
// persistence.MaxDue, which no poller's now reaches, so that the claim and its index stay as they
// are; the statements that take available_at past persistence.HiddenFrom for hidden leave parked
// rows out. claimed_by is the instance of ClaimDueAs that claimed a row last, NULL for none; each
// store indexes it (partially, where it can), for ReleaseClaimsOf at a manager's start and after
// a claim whose answer was lost, which must not read the whole table.
func Standard(t string, style Style) Queries {
	in := func(int) string { return "= ANY($1)" }
	if style != Numbered {
		in = func(n int) string { return "IN (" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")" }
	}
	const read = "destination, due, owner, payload, metadata, failure_count, COALESCE(dedup_key, ''), COALESCE(parked_reason, '')"
	const values = "@id, @destination, @due, @due, @owner, @state, @headers, @failureCount"
	return Queries{
		Store: fmt.Sprintf(`INSERT INTO %s (%s)
VALUES (%s)`, t, Columns, values),
		Next:                  fmt.Sprintf(`SELECT MIN(available_at) FROM %s`, t),
		Peek:                  fmt.Sprintf(`SELECT %s FROM %s WHERE id = @id`, read, t),
		Delete:                fmt.Sprintf(`DELETE FROM %s WHERE id = @id`, t),
		IncrementFailureCount: fmt.Sprintf(`UPDATE %s SET failure_count = failure_count + 1 WHERE id = @id`, t),
		CancelByOwner:         fmt.Sprintf(`DELETE FROM %s WHERE owner = @owner AND owner <> ''`, t),
		// A row is claimed at now while its available_at is neither its due time nor past.
		Stats: fmt.Sprintf(`SELECT COUNT(*), SUM(CASE WHEN due <= @now AND parked_reason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN available_at <> due AND available_at > @now AND parked_reason IS NULL THEN 1 ELSE 0 END),
	SUM(CASE WHEN parked_reason IS NOT NULL THEN 1 ELSE 0 END), MIN(due), MAX(due)
FROM %s`, t),
		StatsByDestination: fmt.Sprintf(`SELECT destination, COUNT(*) FROM %s GROUP BY destination`, t),
		List: ListSQL{
			From: fmt.Sprintf(`id, destination, due, owner, metadata, failure_count, COALESCE(dedup_key, ''), COALESCE(parked_reason, '') FROM %s`, t),
			ID:   "id", Due: "due", Owner: "owner", Destination: "destination", Key: "dedup_key", Parked: "parked_reason",
			Table: t,
		},
		Exists:    fmt.Sprintf(`SELECT 1 FROM %s WHERE id = @id`, t),
		KeyHolder: fmt.Sprintf(`SELECT id, due, available_at FROM %s WHERE dedup_key = @key`, t),
		DropKey:   fmt.Sprintf(`UPDATE %s SET dedup_key = NULL WHERE id = @id`, t),
		Schedule: fmt.Sprintf(`INSERT INTO %s (%s, dedup_key)
VALUES (%s, @key)`, t, Columns, values),
		Reschedule: fmt.Sprintf(`UPDATE %s SET due = @due, available_at = @due
WHERE id = @id AND (available_at = due OR available_at <= @now) AND parked_reason IS NULL`, t),
		Survey: fmt.Sprintf(`SELECT destination, COUNT(*), MAX(due), SUM(CASE WHEN available_at >= @hiddenFrom AND available_at <> due THEN 1 ELSE 0 END)
FROM %s WHERE due >= @from AND parked_reason IS NULL GROUP BY destination`, t),
		Park: fmt.Sprintf(`UPDATE %s SET available_at = @parkedAt, parked_reason = @reason, claimed_by = NULL, dedup_key = NULL WHERE id = @id`, t),
		ReleaseClaimsOf: fmt.Sprintf(`UPDATE %s SET available_at = due, claimed_by = NULL
WHERE claimed_by = @instance AND available_at <> due AND available_at < @hiddenFrom AND parked_reason IS NULL`, t),
		PeekIn: func(n int) string {
			return fmt.Sprintf(`SELECT id, %s FROM %s WHERE id %s`, read, t, in(n))
		},
		RemoveIn: func(n int) string { return fmt.Sprintf(`DELETE FROM %s WHERE id %s RETURNING id`, t, in(n)) },
		ReleaseIn: func(n int) string {
			return fmt.Sprintf(`UPDATE %s SET available_at = due, claimed_by = NULL WHERE id %s AND parked_reason IS NULL`, t, in(n))
		},
		UnparkIn: func(n int) string {
			return fmt.Sprintf(`UPDATE %s SET available_at = due, failure_count = 0, parked_reason = NULL, claimed_by = NULL
WHERE id %s AND parked_reason IS NOT NULL`, t, in(n))
		},
		DeleteParkedIn: func(n int) string {
			return fmt.Sprintf(`DELETE FROM %s WHERE id %s AND parked_reason IS NOT NULL`, t, in(n))
		},
	}
}
