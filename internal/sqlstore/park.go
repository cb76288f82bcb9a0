package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// Park sets the timeout with that id aside with reason (see persistence.Parker): its
// available_at moves to persistence.MaxDue, which no claim reaches, and it gives up its claim and
// its key. A reason longer than persistence.MaxParkReasonLength bytes is cut (see ParkReason).
func (s *Store) Park(ctx context.Context, id, reason string) (bool, error) {
	if err := Opened(s); err != nil {
		return false, err
	}
	if reason == "" {
		return false, fmt.Errorf("%w: a parking reason is required", persistence.ErrInvalidTimeout)
	}
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("%s: park %q: %w", s.d.Name, id, err)
		}
		if !s.d.Check.Storable(id) {
			return false, nil
		}
	}
	d := &s.d
	n, err := s.writeCount(ctx, s.st.Park.SQL, s.st.Park.Args(ParkParams{ID: id, Reason: ParkReason(reason)}))
	if err == nil && n == 0 {
		// A server that counts changed rows (MariaDB) counts none when the row was parked with
		// this reason already: look.
		var one int
		err = queryRow(ctx, d.Run.Reader, s.st.Exists.SQL, s.st.Exists.Args(IDParams{ID: id}), &one)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		n = 1
	}
	if err != nil {
		return false, fmt.Errorf("%s: park %q: %w", d.Name, id, err)
	}
	return n > 0, nil
}

// ParkReason is what a store keeps of a parking reason: valid UTF-8 (invalid bytes and NUL, which
// text columns refuse, become U+FFFD), cut to at most persistence.MaxParkReasonLength bytes on a
// character boundary.
func ParkReason(reason string) string {
	reason = strings.ToValidUTF8(reason, "\uFFFD")
	reason = strings.ReplaceAll(reason, "\x00", "\uFFFD")
	if len(reason) <= persistence.MaxParkReasonLength {
		return reason
	}
	cut := persistence.MaxParkReasonLength
	for cut > 0 && !utf8.RuneStart(reason[cut]) { // cut on a character boundary
		cut--
	}
	return reason[:cut]
}

// Unpark makes the parked timeouts among ids claimable again from their due time with their
// failure count at 0, one statement per MaxIn ids, and returns how many it unparked.
func (s *Store) Unpark(ctx context.Context, ids []string) (int, error) {
	return s.parkedIn(ctx, "unpark", func(q Queries) func(int) string { return q.UnparkIn }, ids)
}

// DeleteParked deletes the parked timeouts among ids, one statement per MaxIn ids, each
// deleting only rows still parked, and returns how many it deleted.
func (s *Store) DeleteParked(ctx context.Context, ids []string) (int, error) {
	return s.parkedIn(ctx, "delete parked", func(q Queries) func(int) string { return q.DeleteParkedIn }, ids)
}

// parkedIn runs the statement the dialect's statement maker of (picked once the store is known
// to be opened) makes for each chunk of MaxIn ids, which changes the parked rows among them and
// returns their count, and returns the total.
func (s *Store) parkedIn(ctx context.Context, what string, of func(Queries) func(n int) string, ids []string) (int, error) {
	if err := Opened(s); err != nil {
		return 0, err
	}
	statement := of(s.d.SQL)
	if s.d.Check.Storable != nil {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("%s: %s: %w", s.d.Name, what, err)
		}
	}
	ids = s.keys(ids)
	total := 0
	for chunk := range slices.Chunk(ids, s.maxIn(len(ids))) {
		query, args := s.d.Bind.in(statement, chunk)
		n, err := s.writeCount(ctx, query, args)
		if err != nil {
			return total, fmt.Errorf("%s: %s: %w", s.d.Name, what, err)
		}
		total += int(n)
	}
	return total, nil
}

// ClaimDueAs claims as ClaimDue does, recording instance as the claims' holder in the claim's
// own statement.
func (s *Store) ClaimDueAs(ctx context.Context, instance string, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	if err := ValidInstance(instance); err != nil {
		return nil, err
	}
	return s.claimDue(ctx, instance, now, limit, lease)
}

// ReleaseClaimsOf makes every timeout instance holds claimed, neither hidden nor parked,
// claimable again from its due time, in one statement, and returns how many it released. Each
// store indexes the claiming instance, so that the statement reads only the rows it names.
func (s *Store) ReleaseClaimsOf(ctx context.Context, instance string) (int, error) {
	if err := Opened(s); err != nil {
		return 0, err
	}
	if err := ValidInstance(instance); err != nil {
		return 0, err
	}
	n, err := s.writeCount(ctx, s.st.ReleaseClaimsOf.SQL, s.st.ReleaseClaimsOf.Args(InstanceParams{Instance: instance}))
	if err != nil {
		return 0, fmt.Errorf("%s: release the claims of %q: %w", s.d.Name, instance, err)
	}
	return int(n), nil
}

// ValidInstance checks an instance name: not empty, at most persistence.MaxIDLength bytes, valid
// UTF-8 without NUL (what every backend's text column keeps).
func ValidInstance(instance string) error {
	switch {
	case instance == "":
		return fmt.Errorf("%w: the instance name is empty", persistence.ErrInvalidTimeout)
	case len(instance) > persistence.MaxIDLength:
		return fmt.Errorf("%w: the instance name is longer than %d bytes", persistence.ErrInvalidTimeout, persistence.MaxIDLength)
	case !utf8.ValidString(instance) || strings.ContainsRune(instance, 0):
		return fmt.Errorf("%w: the instance name %q is not valid UTF-8 without NUL", persistence.ErrInvalidTimeout, instance)
	}
	return nil
}

// HoldInstance takes instance for the caller until release is called or the store is closed
// (see persistence.Claimer): a name another holder has is an error wrapping
// persistence.ErrInstanceInUse that names it.
func (s *Store) HoldInstance(ctx context.Context, instance string) (func() error, error) {
	if err := Opened(s); err != nil {
		return nil, err
	}
	if err := ValidInstance(instance); err != nil {
		return nil, err
	}
	if s.d.Locks.Hold == nil {
		return nil, fmt.Errorf("%s: hold instance %q: this store cannot hold a name", s.d.Name, instance)
	}
	release, held, err := s.d.Locks.Hold(ctx, instance)
	if err != nil {
		return nil, fmt.Errorf("%s: hold instance %q: %w", s.d.Name, instance, err)
	}
	if !held {
		return nil, fmt.Errorf("%s: hold instance %q: %w", s.d.Name, instance, persistence.ErrInstanceInUse)
	}
	return s.holds.add(release)
}

// holds are the releases of a store's live holds, which Close calls.
type holds struct {
	mu     sync.Mutex
	closed bool
	live   map[*func() error]func() error // each live hold's release, made safe to call twice
}

// add keeps release until it is called, and returns it made safe to call more than once.
func (h *holds) add(release func() error) (func() error, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errors.Join(errors.New("the store is closed"), release())
	}
	if h.live == nil {
		h.live = make(map[*func() error]func() error)
	}
	once := sync.OnceValue(release)
	key := &release
	h.live[key] = once
	return func() error {
		h.mu.Lock()
		delete(h.live, key)
		h.mu.Unlock()
		return once()
	}, nil
}

// releaseAll releases every live hold, and every later one at once.
func (h *holds) releaseAll() error {
	h.mu.Lock()
	h.closed = true
	live := h.live
	h.live = nil
	h.mu.Unlock()
	var err error
	for _, release := range live {
		err = errors.Join(err, release()) // the once its holder may be calling too (a stop racing Close)
	}
	return err
}

// SessionLock is a lock a database server keeps for one session (one connection) until it is
// unlocked or the session ends.
type SessionLock struct {
	// Try takes the lock on conn without waiting and says whether it got it.
	Try func(ctx context.Context, conn *sql.Conn) (bool, error)
	// Unlock gives it back on conn.
	Unlock func(ctx context.Context, conn *sql.Conn) error
}

// HoldCheckInterval is how often a held session is pinged: so that no idle timeout of the server
// (MariaDB's wait_timeout) or of the network ends it, and so that a hold lost with its session (a
// failover to a standby, a restarted server, a dead connection) is noticed and taken again within
// seconds, leaving another process little time to take the name meanwhile.
const HoldCheckInterval = 5 * time.Second

// HoldRetakeInterval is how often a lost hold is tried again while the server cannot be reached
// (a failover not yet complete).
const HoldRetakeInterval = time.Second

// holdCallTimeout bounds one ping, take or unlock of a hold.
const holdCallTimeout = 10 * time.Second

// HoldOnConn holds lock on a connection of db's of its own until release is called, which unlocks
// it and closes the connection (it does not go back to the pool). A goroutine pings the
// connection every HoldCheckInterval; when the connection is found dead, the server has ended its
// session and the lock with it (after a failover the new primary never had it), and the goroutine
// takes the lock again on a new connection, which db opens wherever its DSN now leads, every
// HoldRetakeInterval while the server cannot be reached and every HoldCheckInterval while another
// session has the lock. Meanwhile another process may take the name: see persistence.Claimer.
func HoldOnConn(ctx context.Context, db *sql.DB, lock SessionLock) (release func() error, held bool, err error) {
	conn, err := take(ctx, db, lock)
	if err != nil || conn == nil {
		return nil, false, err
	}
	h := &connHold{db: db, lock: lock, conn: conn, stop: make(chan struct{}), stopped: make(chan struct{})}
	h.calls, h.cancelCalls = context.WithCancel(context.Background())
	go h.keepAlive()
	return h.release, true, nil
}

// take takes lock on a new connection, nil when another session has it.
func take(ctx context.Context, db *sql.DB, lock SessionLock) (*sql.Conn, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	ok, err := lock.Try(ctx, conn)
	if err != nil || !ok {
		return nil, errors.Join(err, discard(conn))
	}
	return conn, nil
}

// discard closes conn's connection rather than return it to the pool: a session ended releases
// every lock it may still hold.
func discard(conn *sql.Conn) error {
	err := conn.Raw(func(any) error { return driver.ErrBadConn })
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return nil
	}
	return err
}

type connHold struct {
	db            *sql.DB
	lock          SessionLock
	conn          *sql.Conn // nil while the hold is lost
	stop, stopped chan struct{}
	// calls is the context of the keep-alive's calls: release cancels it, so that a check waiting
	// on a server that stopped answering does not hold the release up.
	calls       context.Context
	cancelCalls context.CancelFunc
}

func (h *connHold) keepAlive() {
	defer close(h.stopped)
	wait := time.NewTimer(HoldCheckInterval)
	defer wait.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-wait.C:
		}
		wait.Reset(h.check())
	}
}

// check pings the held session, takes the lock again when the session is gone, and returns how
// long to wait before the next check.
func (h *connHold) check() time.Duration {
	ctx, cancel := context.WithTimeout(h.calls, holdCallTimeout)
	defer cancel()
	if h.conn != nil && h.conn.PingContext(ctx) != nil {
		_ = discard(h.conn)
		h.conn = nil
	}
	if h.conn != nil {
		return HoldCheckInterval
	}
	conn, err := take(ctx, h.db, h.lock)
	h.conn = conn
	if conn == nil && err != nil {
		return HoldRetakeInterval // the server away: soon again
	}
	return HoldCheckInterval // held again, or the name taken meanwhile
}

// releaseUnlockTimeout bounds the unlock at a release: a server that does not answer by then
// frees the lock when it finds the closed connection gone.
const releaseUnlockTimeout = 2 * time.Second

func (h *connHold) release() error {
	close(h.stop)
	h.cancelCalls()
	<-h.stopped
	if h.conn == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseUnlockTimeout)
	defer cancel()
	// Unlocked first, so that the name is free when release returns rather than when the server
	// notices the connection closed.
	err := h.lock.Unlock(ctx, h.conn)
	if err != nil && h.conn.PingContext(ctx) != nil {
		err = nil // the session is gone, and its lock with it
	}
	return errors.Join(err, discard(h.conn))
}
