package dashboard

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// overview is what the dashboard's first page and GET /api/stats show.
type overview struct {
	Endpoint string    `json:"endpoint"`
	Now      time.Time `json:"now"`
	Pending  int       `json:"pending"`
	DueNow   int       `json:"due_now"`
	Claimed  int       `json:"claimed"`
	// Parked counts the pending timeouts that are parked: they wait for an operator.
	Parked int `json:"parked"`
	// Earliest and Latest are the due times of the earliest and latest pending timeouts.
	Earliest *time.Time `json:"earliest,omitempty"`
	Latest   *time.Time `json:"latest,omitempty"`
	// OldestOverdue is how long the earliest overdue timeout has been due, in seconds.
	OldestOverdue float64 `json:"oldest_overdue_seconds"`
	// Due counts the pending timeouts by when they are due: due now, in the next minute, ...
	Due []count `json:"due"`
	// DueHistogram is Due in finer buckets, for the plot.
	DueHistogram  []count      `json:"due_histogram"`
	ByDestination []namedCount `json:"by_destination"`
	ByOwner       ownerCounts  `json:"by_owner"`
	// Failing counts the sampled timeouts whose forward failed and is retried: all of them when
	// the sample is complete (Partial false).
	Failing  int            `json:"failing_in_sample"`
	Dispatch dispatchCounts `json:"dispatch"`
	Breakers []breaker      `json:"breakers"`
	Critical *criticalError `json:"critical_error,omitempty"`
	Clock    clockOffset    `json:"clock"`
	// Sampled is how many of the earliest due timeouts were read to count Failing, and Due and
	// ByOwner where the store cannot count them exactly.
	Sampled int  `json:"sampled"`
	Partial bool `json:"sample_partial"`
}

// count is the number of pending timeouts, parked ones left out, in a window of due times.
// Exact says it is exact; otherwise it is estimated from the sample, and AtLeast says it is a
// lower bound (the window reaches beyond the sample), AtMost an upper bound. Window bounds are
// seconds from now.
type count struct {
	Label   string   `json:"label"`
	From    *float64 `json:"from_seconds,omitempty"`
	Before  *float64 `json:"before_seconds,omitempty"`
	Count   int      `json:"count"`
	Exact   bool     `json:"exact"`
	AtLeast bool     `json:"at_least,omitempty"`
	AtMost  bool     `json:"at_most,omitempty"`
}

type namedCount struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// ownerCounts counts the pending timeouts by owner, most first. Exact when the store counts
// them (persistence.OwnerCounter): Owners then lists the topOwners with the most. Otherwise they
// count the sample, the earliest due timeouts. Complete when Owners lists every owner that has
// pending timeouts, with its every timeout. NoOwner counts those without an owner.
type ownerCounts struct {
	Exact    bool         `json:"exact"`
	Complete bool         `json:"complete"`
	Owners   []namedCount `json:"owners"`
	NoOwner  int          `json:"no_owner"`
}

// topOwners is how many owners the overview lists when the store counts them exactly.
const topOwners = 100

// failingSample is how many of the earliest due timeouts the overview reads when the store
// counts the windows and the owners exactly: the sample then counts failed forwards alone,
// which stay among the earliest due while they are retried.
const failingSample = 100

type dispatchCounts struct {
	Stored     uint64 `json:"stored"`
	Dispatched uint64 `json:"dispatched"`
	Early      uint64 `json:"early"`
	// Parked counts the timeouts parked since the manager started.
	Parked   uint64            `json:"parked"`
	Lateness []latenessBucket  `json:"lateness"`
	Failures map[string]uint64 `json:"failures"`
}

type latenessBucket struct {
	UpTo  float64 `json:"up_to_seconds"` // 0: later than every bucket before
	Count uint64  `json:"count"`
}

type breaker struct {
	Name  string `json:"name"`
	Armed bool   `json:"armed"`
}

// clockOffset is the latest measurement of the offset between the manager's clock and its
// store's (timeouts.Manager.ClockOffset).
type clockOffset struct {
	// Measured is false before the first measurement, and always with a store that has no clock
	// of its own (memory, SQLite): the manager's clock is then the store's.
	Measured bool `json:"measured"`
	// Offset is the store's clock minus the manager's, in seconds: positive when the manager's
	// clock is behind.
	Offset float64 `json:"offset_seconds"`
	// Error bounds how far Offset may be from the true offset: half the measurement's round trip.
	Error float64 `json:"error_seconds"`
	// At is when it was measured, on the manager's clock.
	At *time.Time `json:"measured_at,omitempty"`
	// Alarm is true while the offset is above the manager's alarm (Config.ClockSkewAlarm).
	Alarm bool `json:"alarm"`
}

type criticalError struct {
	Breaker string `json:"breaker"`
	Message string `json:"message"`
}

// A window of due times, relative to now; before 0 means no upper end.
type window struct {
	label         string
	from, before  time.Duration
	open, overdue bool
}

var (
	summaryWindows = []window{
		{label: "due now", overdue: true},
		{label: "next minute", before: time.Minute},
		{label: "next hour", from: time.Minute, before: time.Hour},
		{label: "next day", from: time.Hour, before: 24 * time.Hour},
		{label: "later", from: 24 * time.Hour, open: true},
	}
	histogramWindows = []window{
		{label: "overdue", overdue: true},
		{label: "<1m", before: time.Minute},
		{label: "1–5m", from: time.Minute, before: 5 * time.Minute},
		{label: "5–15m", from: 5 * time.Minute, before: 15 * time.Minute},
		{label: "15m–1h", from: 15 * time.Minute, before: time.Hour},
		{label: "1–6h", from: time.Hour, before: 6 * time.Hour},
		{label: "6–24h", from: 6 * time.Hour, before: 24 * time.Hour},
		{label: "1–7d", from: 24 * time.Hour, before: 7 * 24 * time.Hour},
		{label: ">7d", from: 7 * 24 * time.Hour, open: true},
	}
)

// overview reads the store (Stats, CountOwners, CountDue, and one List of the earliest due
// timeouts, SampleSize of them, or failingSample when the store counts the rest exactly) and the
// manager's counters.
func (s *server) overview(ctx context.Context) (overview, error) {
	var (
		st                  persistence.Stats
		owners              persistence.OwnerCounts
		statsErr, ownersErr error
		wg                  sync.WaitGroup
	)
	wg.Go(func() { st, statsErr = s.m.Stats(ctx) })
	wg.Go(func() { owners, ownersErr = s.m.CountOwners(ctx, topOwners+1) })
	wg.Wait()
	ownersExact := ownersErr == nil
	if errors.Is(ownersErr, persistence.ErrUnsupported) {
		ownersErr = nil
	}
	if err := cmp.Or(statsErr, ownersErr); err != nil {
		return overview{}, err
	}
	// Stats takes its own now; the windows start at ours, taken after it, so a timeout Stats
	// counted as due now is not counted again in the next minute. The sample is read beside
	// CountDue, on another connection.
	now := time.Now()
	size := s.cfg.SampleSize
	if ownersExact {
		size = min(size, failingSample)
	}
	var (
		sample            []persistence.Timeout
		exact             dueBefore
		sampleErr, dueErr error
	)
	wg.Go(func() { sample, sampleErr = s.m.List(ctx, persistence.ListOptions{Limit: size}) })
	exact, dueErr = s.countDue(ctx, now)
	wg.Wait()
	if err := cmp.Or(dueErr, sampleErr); err != nil {
		return overview{}, err
	}
	if exact == nil && size < s.cfg.SampleSize { // the windows need the whole sample
		size = s.cfg.SampleSize
		if sample, sampleErr = s.m.List(ctx, persistence.ListOptions{Limit: size}); sampleErr != nil {
			return overview{}, sampleErr
		}
	}
	o := overview{
		Endpoint: s.m.Activity().Endpoint, Now: now.UTC(), Pending: st.Pending, DueNow: st.DueNow, Claimed: st.Claimed, Parked: st.Parked,
		Sampled: len(sample), Partial: len(sample) >= size && st.Pending > len(sample),
	}
	if st.Pending > 0 {
		earliest, latest := st.Earliest.UTC(), st.Latest.UTC()
		o.Earliest, o.Latest = &earliest, &latest
		if st.DueNow > 0 {
			o.OldestOverdue = max(now.Sub(st.Earliest), 0).Seconds()
		}
	}
	o.Due = countWindows(summaryWindows, sample, o.Partial, now, st, exact)
	o.DueHistogram = countWindows(histogramWindows, sample, o.Partial, now, st, exact)
	o.ByDestination = sortedCounts(st.ByDestination)
	o.ByOwner = countOwners(owners, ownersExact, sample, o.Partial)
	for _, t := range sample {
		if t.FailureCount > 0 {
			o.Failing++
		}
	}

	a := s.m.Activity()
	o.Dispatch = dispatchCounts{Stored: a.Stored, Dispatched: a.Dispatched, Early: a.Early, Parked: a.Parked, Failures: a.Failures}
	for _, b := range a.Lateness {
		o.Dispatch.Lateness = append(o.Dispatch.Lateness, latenessBucket{UpTo: b.UpTo.Seconds(), Count: b.Count})
	}
	for _, b := range a.Breakers {
		o.Breakers = append(o.Breakers, breaker{Name: b.Name, Armed: b.Armed})
	}
	if c := a.Clock; c.Measured {
		at := c.At.UTC()
		o.Clock = clockOffset{Measured: true, Offset: c.Offset.Seconds(), Error: c.Error.Seconds(), At: &at, Alarm: c.Alarm}
	}
	var ce *critical.Error
	if err := s.m.Err(); errors.As(err, &ce) {
		o.Critical = &criticalError{Breaker: ce.Breaker, Message: ce.Message}
	}
	return o, nil
}

// countOwners is the owners as the store counted them exactly, or else as the sample counts
// them.
func countOwners(counted persistence.OwnerCounts, exact bool, sample []persistence.Timeout, partial bool) ownerCounts {
	if exact {
		o := ownerCounts{Exact: true, Complete: len(counted.Top) <= topOwners, NoOwner: counted.NoOwner, Owners: []namedCount{}}
		for _, c := range counted.Top[:min(len(counted.Top), topOwners)] {
			o.Owners = append(o.Owners, namedCount{Name: c.Owner, Count: c.Count})
		}
		return o
	}
	o := ownerCounts{Complete: !partial, Exact: !partial}
	owners := map[string]int{}
	for _, t := range sample {
		if t.Owner == "" {
			o.NoOwner++
		} else {
			owners[t.Owner]++
		}
	}
	o.Owners = sortedCounts(owners)
	return o
}

// dueBefore holds exact counts of the pending timeouts, parked ones left out, due before now+d,
// by d; the count at 0 is of those due at now (due <= now).
type dueBefore map[time.Duration]int

// countDue counts exactly, with one CountDue, the pending timeouts due before every window
// bound. It returns nil, and the windows are estimated, when the store cannot count so.
func (s *server) countDue(ctx context.Context, now time.Time) (dueBefore, error) {
	var ds []time.Duration
	for _, w := range slices.Concat(summaryWindows, histogramWindows) {
		for _, d := range []time.Duration{w.from, w.before} {
			if !slices.Contains(ds, d) {
				ds = append(ds, d)
			}
		}
	}
	bounds := make([]time.Time, len(ds))
	for i, d := range ds {
		bounds[i] = now.Add(d)
		if d == 0 {
			bounds[i] = now.Add(time.Nanosecond) // due <= now
		}
	}
	counts, err := s.m.CountDue(ctx, bounds)
	if errors.Is(err, persistence.ErrUnsupported) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	exact := make(dueBefore, len(ds))
	for i, d := range ds {
		exact[d] = counts[i]
	}
	return exact, nil
}

// countWindows counts the pending timeouts, parked ones left out, in each window. With exact
// counts (from countDue) a window within them is their difference, and the open window after
// them what Stats' Pending and Parked leave over. Otherwise the overdue window is Stats' exact
// DueNow; the others count the sample, the earliest due timeouts, which holds every timeout due
// before its last one: a window ending after that is a lower bound, unless the sample is
// complete. An open window that exact counts do not reach is what the others leave over, an
// upper bound unless every other is exact.
func countWindows(windows []window, sample []persistence.Timeout, partial bool, now time.Time, st persistence.Stats, exact dueBefore) []count {
	var horizon time.Time // every timeout due before it is in the sample
	if partial {
		horizon = sample[len(sample)-1].Due
	}
	total := max(st.Pending-st.Parked, 0)
	out := make([]count, len(windows))
	counted, allExact := 0, true
	for i, w := range windows {
		c := count{Label: w.label}
		from, fromOK := exact[w.from]
		before, beforeOK := exact[w.before]
		switch {
		case w.overdue:
			c.Before = seconds(0)
			c.Count, c.Exact = st.DueNow, true
			if fromOK {
				c.Count = from
			}
		case w.open:
			c.From = seconds(w.from)
			if fromOK {
				c.Count, c.Exact = max(total-from, 0), true
			} else {
				c.Count, c.Exact = max(total-counted, 0), allExact
				c.AtMost = !allExact
			}
		case fromOK && beforeOK:
			c.From, c.Before = seconds(w.from), seconds(w.before)
			c.Count, c.Exact = max(before-from, 0), true
		default:
			c.From, c.Before = seconds(w.from), seconds(w.before)
			from, before := now.Add(w.from), now.Add(w.before)
			for _, t := range sample {
				if t.Parked == "" && t.Due.After(now) && !t.Due.Before(from) && t.Due.Before(before) {
					c.Count++
				}
			}
			c.AtLeast = partial && before.After(horizon)
			c.Exact = !c.AtLeast
		}
		allExact = allExact && c.Exact
		counted += c.Count
		out[i] = c
	}
	return out
}

func seconds(d time.Duration) *float64 {
	s := d.Seconds()
	return &s
}

// sortedCounts lists counts, largest first, then by name.
func sortedCounts(m map[string]int) []namedCount {
	out := make([]namedCount, 0, len(m))
	for name, n := range m {
		out = append(out, namedCount{Name: name, Count: n})
	}
	slices.SortFunc(out, func(a, b namedCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name))
	})
	return out
}
