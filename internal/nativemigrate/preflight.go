package nativemigrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// ErrPreflight is wrapped by the error of a migration whose preflight found a problem; nothing
// was changed then.
var ErrPreflight = errors.New("rabbitmq: migration preflight failed")

// Preflight is what a migration checks before it touches anything: what the store holds, whether
// the delay infrastructure is right, whether every destination can be reached natively, and
// whether the longest delay fits the levels.
type Preflight struct {
	// Now is when the checks ran.
	Now time.Time
	// Survey describes the timeouts due at or after the cutoff.
	Survey persistence.Survey
	// Topology is nil when the delay infrastructure passed Verify (an error wrapping ErrTopology, a
	// *nativedelay.VerifyError, otherwise).
	Topology error
	// MissingDestinations are destination queues that do not exist, with their timeout counts.
	MissingDestinations map[string]int
	// InvalidDestinations are destinations that cannot end a routing key, with the reason.
	InvalidDestinations map[string]error
	// TooLate is set when the latest timeout is due further ahead than MaxDelay; timeouts due
	// after LatestMigratable cannot be migrated.
	TooLate          bool
	LatestMigratable time.Time
}

// Ready reports whether the migration can go ahead: the topology is right and, unless skipping
// unmigratable timeouts is allowed, every timeout can be migrated.
func (p Preflight) Ready(skipUnmigratable bool) bool {
	return p.Topology == nil && (skipUnmigratable || p.Migratable())
}

// Migratable reports whether every timeout can be migrated as far as the preflight can tell.
func (p Preflight) Migratable() bool {
	return len(p.MissingDestinations) == 0 && len(p.InvalidDestinations) == 0 && !p.TooLate
}

// Problems lists, in words, what stands in the way.
func (p Preflight) Problems() []string {
	var out []string
	if p.Topology != nil {
		out = append(out, p.Topology.Error())
	}
	for _, d := range sortedKeys(p.MissingDestinations) {
		out = append(out, fmt.Sprintf("destination queue %s does not exist (%d timeout(s))", d, p.MissingDestinations[d]))
	}
	for _, d := range sortedKeys(p.InvalidDestinations) {
		out = append(out, fmt.Sprintf("destination %q cannot be reached natively (%d timeout(s)): %v", d, p.Survey.Destinations[d], p.InvalidDestinations[d]))
	}
	if p.TooLate {
		out = append(out, fmt.Sprintf("the latest timeout is due at %s, %s from now: longer than the 268,435,455 s (about 8.5 years) the delay levels hold; those due after %s cannot be migrated",
			p.Survey.Latest.Format(time.RFC3339), p.Survey.Latest.Sub(p.Now).Round(time.Hour), p.LatestMigratable.Format(time.RFC3339)))
	}
	return out
}

// Err is nil when the migration can go ahead, and otherwise an ErrPreflight naming each problem.
func (p Preflight) Err(skipUnmigratable bool) error {
	if p.Ready(skipUnmigratable) {
		return nil
	}
	problems := p.Problems()
	hint := ""
	if p.Topology == nil {
		hint = "\n(create the missing destination queues, or let the migration leave these timeouts in the store for the timeout manager and migrate the others)"
	}
	return fmt.Errorf("%w:\n  %s%s", ErrPreflight, strings.Join(problems, "\n  "), hint)
}

// Check runs the preflight of a migration; Migrate runs it first too.
func Check(ctx context.Context, config MigrationConfig) (Preflight, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return Preflight{}, err
	}
	return check(ctx, config)
}

func check(ctx context.Context, config MigrationConfig) (Preflight, error) {
	h := config.Store.(persistence.Handover) // Validate checked it
	p := Preflight{
		Now:                 time.Now(),
		MissingDestinations: map[string]int{},
		InvalidDestinations: map[string]error{},
	}
	var err error
	if p.Survey, err = h.Survey(ctx, config.cutoff()); err != nil {
		return Preflight{}, fmt.Errorf("rabbitmq: surveying the store: %w", err)
	}
	problem, err := config.Target.Verify(ctx)
	if err != nil {
		return Preflight{}, err
	}
	p.Topology = problem
	for d, n := range p.Survey.Destinations {
		invalid, missing, err := config.Target.CheckDestination(ctx, d)
		switch {
		case err != nil:
			return Preflight{}, err
		case invalid != nil:
			p.InvalidDestinations[d] = invalid
		case missing:
			p.MissingDestinations[d] = n
		}
	}
	if max := config.Target.MaxDelay(); max > 0 {
		p.LatestMigratable = p.Now.Add(max)
		p.TooLate = p.Survey.Latest.After(p.LatestMigratable)
	}
	return p, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
