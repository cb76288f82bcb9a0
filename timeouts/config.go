package timeouts

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/timeoutmill/timeoutmill/critical"
	"github.com/timeoutmill/timeoutmill/dispatcherqueue"
	"github.com/timeoutmill/timeoutmill/internal/announce"
	"github.com/timeoutmill/timeoutmill/internal/breaker"
	"github.com/timeoutmill/timeoutmill/internal/configerr"
	"github.com/timeoutmill/timeoutmill/internal/storeopen"
	"github.com/timeoutmill/timeoutmill/internal/wireparse"
	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/satellites"
	"github.com/timeoutmill/timeoutmill/wire"
)

// CriticalError is the error a Manager raises when a stage keeps failing for longer than its
// wait (Config.OnCriticalError, Manager.Err). Its Breaker names the stage (fetch, store,
// dispatch, recovery). Its Err is the last failure.
type CriticalError = critical.Error

// ErrInvalidConfig is wrapped by every configuration error of this package. It is the same
// value in every package of the module: errors.Is with it matches them all.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Defaults of Config, for a command line or a test that shows or compares them.
const (
	DefaultClaimBatchSize                      = 500
	DefaultAnnouncementIDs                     = announce.DefaultIDsPerMessage
	DefaultClaimLease                          = time.Minute
	DefaultTimeToTriggerStoreCircuitBreaker    = 30 * time.Second
	DefaultTimeToTriggerDispatchCircuitBreaker = 30 * time.Second
)

// Defaults of Config that only its field comments state.
const (
	defaultPollInterval                                            = time.Minute
	defaultTimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = 2 * time.Minute
	defaultMaximumRecoveryFailuresPerSecond                        = 1
)

// Config configures a Manager: the timeout manager of one endpoint. NewManager and Validate
// apply the defaults first. Then they refuse what each field's documentation says is refused.
// The error wraps ErrInvalidConfig and names the field. A field that names no refusal takes any
// value.
type Config struct {
	// Endpoint names the endpoint. Its queues are Endpoint.Timeouts and
	// Endpoint.TimeoutsDispatcher. Required. Refused: empty, longer than 200 bytes, with white
	// space or a control character, or starting or ending with a dot (wire.ErrInvalidName).
	Endpoint string
	// Store keeps the timeouts. Required. If it implements persistence.Installer, its
	// SetupInfrastructure runs when the router starts the manager, before the satellites handle
	// anything (see Manager.Ready). SkipInfrastructureSetup turns that off. Every store of this
	// module implements persistence.Parker. With such a store, a due timeout may have its forward
	// and its error-queue copy both refused for the message's sake (one larger than the broker
	// takes). It is then parked with the reason. An operator replays it (Manager.Unpark) or cancels
	// it. With a store that is no persistence.Parker, such a timeout is retried at the dispatch
	// breaker's pace until TimeToTriggerDispatchCircuitBreaker raises a critical error. Refused:
	// nil, a nil pointer, and a store of this module that its package's Open or New did not make
	// (a zero-value &sqlite.Store{}). A store of your own is refused only when nil or a nil pointer.
	// NewManager cannot tell whether it was set up. So its own calls must fail on a value it never
	// set up.
	Store persistence.Store
	// Publisher sends due messages to their destinations, ids to the dispatcher queue and
	// failures to the error queue. Required. Refused: nil, a nil pointer, and (by NewManager)
	// Watermill's GoChannel created without gochannel.Config{BlockPublishUntilSubscriberAck: true}.
	// Without it, its Publish returns before any subscriber has the message. A message it drops as
	// it closes would then count as delivered, and its timeout be removed.
	Publisher message.Publisher
	// Subscriber consumes the Timeouts and TimeoutsDispatcher queues. Required. On a broker that
	// fans out (Watermill's GoChannel, AMQP with a fanout topology) every instance sees every
	// message. Use queue semantics so each message reaches one instance. Refused: nil and a nil
	// pointer.
	Subscriber message.Subscriber

	// ErrorQueue receives messages that can never be handled. Defaults to "error". Refused: a
	// name Endpoint's rules refuse.
	ErrorQueue string
	// PollInterval is the longest the poller sleeps between looks at the store. It also wakes at
	// the next due time and when an earlier timeout is stored. Defaults to 1 minute. Negative is
	// refused.
	PollInterval time.Duration
	// ClaimBatchSize is how many due ids one claim takes. Defaults to 500, or to 1000 when
	// Publisher is Watermill's in-process GoChannel (see AnnouncementIDs). One claim is then one
	// message. The dispatch satellite handles its ids in batches side by side. Negative is
	// refused.
	ClaimBatchSize int
	// AnnouncementIDs is how many due ids one message on the dispatcher queue carries at most. A
	// claim is announced in a few messages. The dispatch satellite handles each as a batch.
	// Defaults to 100, or to 1000 (the most) when Publisher is Watermill's in-process GoChannel.
	// That one hands a subscriber one message at a time. So a claim's ids are dispatched in
	// batches side by side, not one message after another. Set it to 1 during a rolling upgrade
	// (see docs/wire.md), while instances of a timeoutmill release that reads only one id per
	// message still consume the dispatcher queue. Such an instance sends a many-id message to the
	// error queue. Its timeouts are delivered a ClaimLease late by another instance, never lost.
	// Refused: negative, and above 1000.
	AnnouncementIDs int
	// ClaimLease is how long a claimed id stays hidden from other pollers. An id whose dispatcher
	// message was lost, or whose poller was killed before announcing it, is claimed again when its
	// lease runs out. An id still being announced or dispatched then is announced again. That is a
	// duplicate, never a loss. So keep it longer than that takes. Defaults to 1 minute. Negative
	// is refused.
	ClaimLease time.Duration
	// NumberOfRetries is how many times forwarding a due message is retried after a failed
	// first attempt before it goes to the error queue. Defaults to 0: one attempt. A forward may
	// fail because the connection to the broker or database failed (closed, lost, being made
	// again). That is not an attempt. It is retried at the dispatch breaker's pace once the
	// connection is back, however often. Negative is refused.
	NumberOfRetries int

	// TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages is how long the store may fail to
	// be polled before a critical error is raised. Defaults to 2 minutes. The wait starts at the
	// first failed poll (an idle poller looks at least every PollInterval). The error comes on
	// time, not at the next poll after it. Negative is refused.
	TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages time.Duration
	// TimeToTriggerFetchCircuitBreaker is the MSMQ transport's name for
	// TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages. It is kept so that configuration
	// written for it works. Refused: negative, and a value other than
	// TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages when both are set.
	//
	// Deprecated: set TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages.
	TimeToTriggerFetchCircuitBreaker time.Duration
	// TimeToTriggerStoreCircuitBreaker is how long storing delayed messages may fail before a
	// critical error is raised. Defaults to 30 seconds. Negative is refused.
	TimeToTriggerStoreCircuitBreaker time.Duration
	// TimeToTriggerDispatchCircuitBreaker is how long dispatching due messages may fail before a
	// critical error is raised. Defaults to 30 seconds. Negative is refused.
	TimeToTriggerDispatchCircuitBreaker time.Duration
	// MaximumRecoveryFailuresPerSecond is how often, averaged over 30 seconds, recording a failed
	// forwarding attempt may itself fail (the store's IncrementFailureCount). Faster than that, a
	// critical error is raised ("Failed to execute error handling for delayed message
	// forwarding"). The message meanwhile is kept, neither lost nor moved to the error queue.
	// Defaults to 1. Negative is refused.
	MaximumRecoveryFailuresPerSecond int
	// RetryDelay is how long a failing stage waits before it tries again. Defaults to 1 second.
	// Negative is refused.
	RetryDelay time.Duration
	// CallTimeout bounds each call the manager makes to its store or its broker: a claim, a
	// store, a lookup, a publish awaiting the broker's confirmation, an announcement, the
	// set-up, taking the instance name. A call past it fails, as a refused one does. Its stage
	// retries. A stage's calls may be in flight for its wait with no success
	// (TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages, TimeToTriggerStoreCircuitBreaker,
	// TimeToTriggerDispatchCircuitBreaker). The stage then raises its critical error, whatever the
	// calls' deadlines, even if a call never returns. So a network that drops packets instead of
	// refusing them stops the endpoint on time. Defaults to 10 seconds, or a stage's wait when
	// that is shorter. Negative is refused. A store's set-up (Installer) must finish within it.
	// Run a long migration with `timeoutmill setup` first. The Manager's own calls on the store
	// (Schedule, Reschedule, Cancel, CancelByOwner, Get, Unpark, DeleteParked) are bounded by it
	// too when their ctx has no deadline. List and Stats are bounded only by their ctx.
	CallTimeout time.Duration

	// OnCriticalError is called once for each critical error. Defaults to logging the error and
	// closing the router the Manager was added to. Manager.Err reports the error either way.
	OnCriticalError func(ctx context.Context, err *CriticalError)
	// MetricsRegisterer, when set, receives the manager's Prometheus metrics (timeoutmill_*,
	// labelled with the endpoint). They are: stored, dispatched, early, pending, failures by stage,
	// breaker state and a histogram of dispatch lateness. Defaults to none. The registerer may
	// refuse a metric: another Manager registered one of the same name and Endpoint on it already.
	// NewManager then returns its error.
	MetricsRegisterer prometheus.Registerer
	// TracerProvider, when set, receives OpenTelemetry spans. There is one for each timeout stored
	// and one for each delivered, linked to the trace of the message that scheduled it. Delayed
	// messages carry their producer's trace as W3C Trace Context headers (traceparent). Publisher
	// and Schedule write them from the message's context. They are delivered unchanged. So a
	// consumer's span continues the producer's trace. Defaults to none: no spans.
	TracerProvider trace.TracerProvider
	// Forwarder, when set, forwards each due message and removes its timeout in one transaction.
	// That gives exactly-once delivery where the transport shares the store's database (see
	// transport/sqltransport). Defaults to publishing with Publisher, then removing: at least once.
	Forwarder satellites.Forwarder
	// SkipInfrastructureSetup leaves the store's tables to the operator (see `timeoutmill setup`).
	SkipInfrastructureSetup bool
	// Instance names this manager's run, stable across its restarts (a StatefulSet pod's name, a
	// systemd unit's instance). It is at most persistence.MaxIDLength bytes of UTF-8, with no
	// control characters. It matters when the Store implements persistence.Claimer. Then the
	// manager holds the name while it runs (after the store's set-up, before the poller's first
	// claim). It gives back at once what an earlier run of that name claimed and did not deliver
	// (a kill -9 leaves such claims). It records the name on its claims. It lets the name go when
	// it stops. Two running managers must never share a name. The store refuses the second one's
	// start (persistence.ErrInstanceInUse, see Manager.Err). That one handles and releases
	// nothing, and closes its router. With a Store that does not implement persistence.Claimer the
	// name changes nothing. Ids claimed by a crashed run wait for their lease (ClaimLease), as they
	// do with no name. Defaults to empty: no name, claims wait for their lease. Refused: longer
	// than persistence.MaxIDLength bytes, invalid UTF-8, only white space, or with a control
	// character.
	Instance string

	// Clock reads the wall clock. Every time the manager takes comes from it: when a poll claims,
	// the due time of a relative delay, when a held forward may go. A store may have a clock of
	// its own (persistence.Clocked: the SQL stores on a database server). Then times come from the
	// store's clock. The manager measures its offset to Clock at least once per poll (see
	// Manager.ClockOffset). Clock is for tests and simulations, such as an instance whose clock is
	// skewed (the system clock plus an offset). Its Now must advance as real time does, since
	// timers and durations run on the process's monotonic clock. Defaults to the system clock. A
	// nil pointer is refused.
	Clock Clock
	// ClockSkewAlarm is how far this manager's clock may be from its store's (persistence.Clocked)
	// before a warning is logged and Manager.ClockOffset reports an alarm. The warning is logged
	// once per change. That is when the offset goes above it, and again when the offset moves by
	// more than it. A notice is logged when the offset comes back under it. The manager keeps
	// working either way. The store's clock decides when a timeout is due. Defaults to 1 second.
	// Negative is refused.
	ClockSkewAlarm time.Duration
}

func (c *Config) setDefaults() {
	if c.ErrorQueue == "" {
		c.ErrorQueue = wire.DefaultErrorQueue
	}
	if c.PollInterval == 0 {
		c.PollInterval = defaultPollInterval
	}
	// GoChannel hands a subscriber one message at a time. So the dispatch satellite's batches run
	// side by side only within one message. It takes the next claim's message only when done
	// with this one. No other process reads it. So a claim is as large as one message carries,
	// and is announced in one.
	_, onGoChannel := c.Publisher.(*gochannel.GoChannel)
	if c.ClaimBatchSize == 0 {
		c.ClaimBatchSize = DefaultClaimBatchSize
		if onGoChannel {
			c.ClaimBatchSize = dispatcherqueue.MaxIDsPerMessage
		}
	}
	if c.AnnouncementIDs == 0 {
		c.AnnouncementIDs = DefaultAnnouncementIDs
		if onGoChannel {
			c.AnnouncementIDs = dispatcherqueue.MaxIDsPerMessage
		}
	}
	if c.ClaimLease == 0 {
		c.ClaimLease = DefaultClaimLease
	}
	if c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages == 0 && c.TimeToTriggerFetchCircuitBreaker > 0 {
		c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = c.TimeToTriggerFetchCircuitBreaker
	}
	if c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages == 0 {
		c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages = defaultTimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages
	}
	if c.MaximumRecoveryFailuresPerSecond == 0 {
		c.MaximumRecoveryFailuresPerSecond = defaultMaximumRecoveryFailuresPerSecond
	}
	if c.TimeToTriggerStoreCircuitBreaker == 0 {
		c.TimeToTriggerStoreCircuitBreaker = DefaultTimeToTriggerStoreCircuitBreaker
	}
	if c.TimeToTriggerDispatchCircuitBreaker == 0 {
		c.TimeToTriggerDispatchCircuitBreaker = DefaultTimeToTriggerDispatchCircuitBreaker
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = breaker.DefaultRetryDelay
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.ClockSkewAlarm == 0 {
		c.ClockSkewAlarm = DefaultClockSkewAlarm
	}
}

// Validate reports the first missing or impossible setting, with the defaults applied first. A
// setting left zero is valid when its default is.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

func (c Config) validate() error {
	if err := wireparse.ValidateName("Endpoint", c.Endpoint); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := wireparse.ValidateName("ErrorQueue", c.ErrorQueue); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Store == nil:
		return invalid("Store is required")
	case unopened(c.Store):
		return invalid("Store is a nil or zero-value %T: create it with its package's Open or New", c.Store)
	case c.Publisher == nil:
		return invalid("Publisher is required")
	case isNilPointer(c.Publisher):
		return invalid("Publisher is a nil %T", c.Publisher)
	case c.Subscriber == nil:
		return invalid("Subscriber is required")
	case isNilPointer(c.Subscriber):
		return invalid("Subscriber is a nil %T", c.Subscriber)
	case c.PollInterval < 0:
		return invalid("PollInterval must be positive, got %s", c.PollInterval)
	case c.ClaimBatchSize < 0:
		return invalid("ClaimBatchSize must be positive, got %d", c.ClaimBatchSize)
	case c.AnnouncementIDs < 0 || c.AnnouncementIDs > dispatcherqueue.MaxIDsPerMessage:
		return invalid("AnnouncementIDs must be from 1 to %d, got %d", dispatcherqueue.MaxIDsPerMessage, c.AnnouncementIDs)
	case c.ClaimLease < 0:
		return invalid("ClaimLease must be positive, got %s", c.ClaimLease)
	case c.NumberOfRetries < 0:
		return invalid("NumberOfRetries must not be negative, got %d", c.NumberOfRetries)
	case c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages < 0:
		return invalid("TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages must be positive, got %s", c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages)
	case c.TimeToTriggerFetchCircuitBreaker < 0:
		return invalid("TimeToTriggerFetchCircuitBreaker must be positive, got %s", c.TimeToTriggerFetchCircuitBreaker)
	case c.TimeToTriggerFetchCircuitBreaker != 0 &&
		c.TimeToTriggerFetchCircuitBreaker != c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages:
		return invalid("TimeToTriggerFetchCircuitBreaker (%s) and TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages (%s) name one setting: set one of them, or both to the same value",
			c.TimeToTriggerFetchCircuitBreaker, c.TimeToWaitBeforeTriggeringCriticalErrorOnTimeoutOutages)
	case c.MaximumRecoveryFailuresPerSecond < 0:
		return invalid("MaximumRecoveryFailuresPerSecond must be positive, got %d", c.MaximumRecoveryFailuresPerSecond)
	case c.TimeToTriggerStoreCircuitBreaker < 0:
		return invalid("TimeToTriggerStoreCircuitBreaker must be positive, got %s", c.TimeToTriggerStoreCircuitBreaker)
	case c.TimeToTriggerDispatchCircuitBreaker < 0:
		return invalid("TimeToTriggerDispatchCircuitBreaker must be positive, got %s", c.TimeToTriggerDispatchCircuitBreaker)
	case c.RetryDelay < 0:
		return invalid("RetryDelay must not be negative, got %s", c.RetryDelay)
	case c.CallTimeout < 0:
		return invalid("CallTimeout must not be negative, got %s", c.CallTimeout)
	case isNilPointer(c.Clock):
		return invalid("Clock is a nil %T", c.Clock)
	case c.ClockSkewAlarm < 0:
		return invalid("ClockSkewAlarm must be positive, got %s", c.ClockSkewAlarm)
	}
	if why := invalidInstance(c.Instance); why != "" {
		return invalid("Instance %s", why)
	}
	return nil
}

// invalidInstance says what is wrong with a Config.Instance. It returns "" for an empty one (no
// name) or a name a store can keep.
func invalidInstance(name string) string {
	switch {
	case name == "":
		return ""
	case len(name) > persistence.MaxIDLength:
		return fmt.Sprintf("is %d bytes long; at most %d", len(name), persistence.MaxIDLength)
	case !utf8.ValidString(name):
		return fmt.Sprintf("%q is not valid UTF-8", name)
	case strings.TrimSpace(name) == "":
		return fmt.Sprintf("%q is only white space", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Sprintf("%q contains a control character", name)
	}
	return ""
}

// unopened reports whether store is a nil pointer, or a store of this module that its package's
// Open or New did not make (a zero-value &postgres.Store{}). Its first call would fail or panic.
// It reads the mark the store's constructor set and nothing else. So it never races with a
// manager already using the store. A store from outside this module carries no mark. Only a
// nil pointer is refused. Its own calls must fail on a value its constructor did not make.
func unopened(store persistence.Store) bool {
	return isNilPointer(store) || storeopen.Check(store) == storeopen.NotOpened
}

// isNilPointer reports whether v is a typed nil pointer in an interface. It is not nil to ==,
// yet its first call would panic.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
