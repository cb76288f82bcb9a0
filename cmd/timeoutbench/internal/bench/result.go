package bench

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Kind names a workload.
type Kind string

// The workloads.
const (
	KindPrecision Kind = "precision"
	KindBacklog   Kind = "backlog"
	KindCeiling   Kind = "ceiling"
	KindScale     Kind = "scale"
)

// Result is one row of the table. Rates of zero and a nil Lateness are shown as "—": they do not
// apply to the row (a ceiling has no lateness).
type Result struct {
	// System is what was measured ("RabbitMQ + PostgreSQL"), Kind the workload.
	System string
	Kind   Kind

	// Messages sent (for Scale: timeouts pending).
	Messages int
	// PublishRate is messages a second handed to the mechanism (Publish returned).
	PublishRate float64
	// DrainRate is messages ÷ (last arrival − due time) for a backlog; for a ceiling the rate of
	// the raw path.
	DrainRate float64
	// Lateness of the messages that arrived; nil when nothing was delivered late or early.
	Lateness *Lateness
	// Counted is true when Early, Lost and Duplicated were counted.
	Counted    bool
	Early      int
	Lost       int
	Duplicated int
	// Notes say what else was measured and how the system was configured.
	Notes []string
	// NotRun says why the row was not measured; the row is shown with it.
	NotRun string
	// Reference marks a row that is not timeoutmill (System.Reference).
	Reference bool

	// Figures are named extra numbers (the store rate at scale, one claim's time, peak RSS),
	// used by the targets.
	Figures map[string]float64
}

// Name is the row's label: system and workload.
func (r Result) Name() string {
	return r.System + " — " + string(r.Kind)
}

// Lateness summarises arrival − due over the arrived messages; negative values are early.
type Lateness struct {
	P50, P99, Max, Min time.Duration
}

// newLateness returns the summary of samples (sorted in place), nil for none.
func newLateness(samples []time.Duration) *Lateness {
	if len(samples) == 0 {
		return nil
	}
	slices.Sort(samples)
	return &Lateness{
		P50: percentile(samples, 0.50),
		P99: percentile(samples, 0.99),
		Max: samples[len(samples)-1],
		Min: samples[0],
	}
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

var columns = []string{"scenario", "messages", "publish/s", "drain/s", "p50 ms", "p99 ms", "max ms", "early", "lost", "dup", "notes"}

// cells renders r for the table.
func (r Result) cells() []string {
	if r.NotRun != "" {
		return []string{r.Name(), "—", "—", "—", "—", "—", "—", "—", "—", "—", "not run: " + r.NotRun}
	}
	c := []string{r.Name(), count(r.Messages), rate(r.PublishRate), rate(r.DrainRate)}
	if r.Lateness != nil {
		c = append(c, millis(r.Lateness.P50), millis(r.Lateness.P99), millis(r.Lateness.Max))
	} else {
		c = append(c, "—", "—", "—")
	}
	if r.Counted {
		c = append(c, early(r.Early, r.Messages), count(r.Lost), count(r.Duplicated))
	} else {
		c = append(c, "—", "—", "—")
	}
	return append(c, strings.Join(r.Notes, "; "))
}

func count(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func early(n, of int) string {
	if n == 0 || of == 0 {
		return count(n)
	}
	return fmt.Sprintf("%s (%.0f %%)", count(n), 100*float64(n)/float64(of))
}

func rate(r float64) string {
	if r <= 0 {
		return "—"
	}
	return count(int(math.Round(r)))
}

func millis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if math.Abs(ms) >= 100 {
		return fmt.Sprintf("%.0f", ms)
	}
	return fmt.Sprintf("%.1f", ms)
}

// WriteText writes results as an aligned plain-text table.
func WriteText(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	for _, r := range results {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

// WriteMarkdown writes results as a Markdown table.
func WriteMarkdown(w io.Writer, results []Result) error {
	var b strings.Builder
	b.WriteString("| " + strings.Join(columns, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(columns)) + "\n")
	for _, r := range results {
		cells := r.cells()
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing the Markdown table: %w", err)
	}
	return nil
}

// median combines the runs of one scenario into its row: the run with the median rate (drain,
// or publish where a ceiling has no drain: the commit rates), the lower of the two middle ones
// for an even count, with the early, lost and duplicated
// messages of every run added up, and a note listing each run's rate. Runs that did not run are
// left out unless none ran.
func median(runs []Result) Result {
	if len(runs) == 1 {
		return runs[0]
	}
	var ran []int
	for i, r := range runs {
		if r.NotRun == "" {
			ran = append(ran, i)
		}
	}
	if len(ran) == 0 {
		return runs[0]
	}
	order := slices.Clone(ran)
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(runs[a].mainRate(), runs[b].mainRate()) })
	mid := order[(len(order)-1)/2]
	m := runs[mid]
	m.Notes = slices.Clone(m.Notes)
	rates := make([]string, len(ran))
	for k, i := range ran {
		rates[k] = rate(runs[i].mainRate())
		if i != mid {
			m.Early += runs[i].Early
			m.Lost += runs[i].Lost
			m.Duplicated += runs[i].Duplicated
		}
	}
	m.Notes = append(m.Notes, fmt.Sprintf("median of %d runs (%s/s, in the order run); lateness of that run; early, lost and dup of all %d",
		len(ran), strings.Join(rates, ", "), len(ran)))
	if failed := len(runs) - len(ran); failed > 0 {
		for _, r := range runs {
			if r.NotRun != "" {
				m.Notes = append(m.Notes, fmt.Sprintf("%d more runs did not run, the first because: %s", failed, r.NotRun))
				break
			}
		}
	}
	return m
}

// mainRate is what median orders runs by: the drain rate, or the publish rate where there is none.
func (r Result) mainRate() float64 {
	if r.DrainRate > 0 {
		return r.DrainRate
	}
	return r.PublishRate
}

// runLabel names run i of n in progress lines: nothing when there is one.
func runLabel(i, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(" (run %d of %d)", i+1, n)
}
