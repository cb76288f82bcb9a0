// Package dashboard serves a web dashboard and a JSON API over a timeout manager: what is pending
// and when it is due, how late deliveries are, the circuit breakers, and a search by id, owner,
// key and destination, with actions to cancel, reschedule or deliver a timeout now.
//
//	h, err := dashboard.New(manager, dashboard.Config{Token: os.Getenv("DASHBOARD_TOKEN")})
//	mux.Handle("/timeouts/", http.StripPrefix("/timeouts", h))
//
// Reading needs nothing; the actions need Config.Token, sent as "Authorization: Bearer TOKEN"
// by POST only, so a page on another site cannot act in the user's name (no cookie is involved).
// Without a token, or with ReadOnly, the actions are refused. docs/dashboard.md describes the
// JSON API and its error bodies.
//
// # Stability
//
// The Go API (New, Config) is stable, and so is the JSON API, the handler's api/... paths: their
// parameters and field names. Fields may be added in any minor version; none is renamed or removed
// without a Breaking entry. While timeoutmill is at v0, an incompatible change to it is made only
// with an entry marked Breaking in CHANGELOG.md that says how to migrate; from v1 on, only in a new
// major version. CI compares the exported API with the baseline in api/ and fails on an
// incompatible change that the CHANGELOG does not name (docs/releasing.md). The HTML pages, their
// URLs and their looks are for people and may change in any release.
package dashboard

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/timeoutmill/timeoutmill/timeouts"
)

// ErrInvalidConfig is returned by New for a configuration it cannot use.
var ErrInvalidConfig = errors.New("dashboard: invalid config")

// Default of Config.SampleSize, and its largest value.
const (
	defaultSampleSize = 10_000
	maxSampleSize     = 10_000
	minTokenLength    = 16
)

// Config configures the dashboard.
type Config struct {
	// Token authorises the actions (cancel, reschedule, deliver now): a POST must carry
	// "Authorization: Bearer TOKEN". At least 16 bytes. Defaults to none: the actions are
	// refused, and the dashboard only reads.
	Token string
	// ReadOnly refuses the actions even with the token and hides their buttons. Defaults to
	// false.
	ReadOnly bool
	// SampleSize is how many of the earliest due timeouts the overview reads to count failed
	// forwards, and pending timeouts by owner and by when they are due where the store cannot
	// count them exactly (persistence.OwnerCounter, persistence.DueCounter): counts that reach
	// beyond the sample are shown as bounds. On a store that counts both, the overview reads at
	// most 100. Defaults to 10,000, which is also the largest.
	SampleSize int
	// Logger receives the errors of the store that the dashboard answers with a 500 (their text
	// is never sent to the browser). Defaults to none.
	Logger watermill.LoggerAdapter
}

func (c *Config) setDefaults() {
	c.SampleSize = cmp.Or(c.SampleSize, defaultSampleSize)
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
}

func (c Config) validate() error {
	switch {
	case c.Token != "" && len(c.Token) < minTokenLength:
		return fmt.Errorf("%w: Token must be at least %d bytes", ErrInvalidConfig, minTokenLength)
	case c.SampleSize < 1 || c.SampleSize > maxSampleSize:
		return fmt.Errorf("%w: SampleSize must be in 1..%d, got %d", ErrInvalidConfig, maxSampleSize, c.SampleSize)
	}
	for _, r := range c.Token {
		if r <= 0x20 || r == 0x7f {
			return fmt.Errorf("%w: Token must not contain whitespace or control characters", ErrInvalidConfig)
		}
	}
	return nil
}

// New returns the dashboard of manager: its pages at "/" and "/timeouts/{id}", and the JSON API
// under "/api/". Mount it at a prefix with http.StripPrefix: its links are relative.
func New(manager *timeouts.Manager, config Config) (http.Handler, error) {
	if manager == nil {
		return nil, fmt.Errorf("%w: the manager is nil", ErrInvalidConfig)
	}
	config.setDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	s, err := newServer(manager, config)
	if err != nil {
		return nil, err
	}
	return s, nil
}
