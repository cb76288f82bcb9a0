package recoverability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// inboxSection is Shuttle's Inbox configuration section. Keys match case-insensitively, as .NET
// configuration does; keys this package does not use (ThreadCount, DurationToSleepWhenIdle, ...;
// see ReadConfig) are ignored so an existing Shuttle file can be read as it stands.
type inboxSection struct {
	WorkQueueURI              string          `json:"WorkQueueUri"`
	DeferredQueueURI          string          `json:"DeferredQueueUri"`
	ErrorQueueURI             string          `json:"ErrorQueueUri"`
	DurationToIgnoreOnFailure json.RawMessage `json:"DurationToIgnoreOnFailure"`
	MaximumFailureCount       json.RawMessage `json:"MaximumFailureCount"`
}

type fileShape struct {
	Inbox   *inboxSection `json:"Inbox"`
	Shuttle *struct {
		ServiceBus *struct {
			Inbox *inboxSection `json:"Inbox"`
		} `json:"ServiceBus"`
	} `json:"Shuttle"`
}

// LoadConfigFile reads the Inbox section of the JSON configuration file at path into cfg; see
// ReadConfig.
func LoadConfigFile(path string, cfg *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: reading %s: %w", ErrInvalidConfig, path, err)
	}
	if err := ReadConfig(bytes.NewReader(data), cfg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ReadConfig reads a configuration section in Shuttle's shape into cfg, either on its own,
// {"Inbox": {...}}, or inside a whole Shuttle file, {"Shuttle": {"ServiceBus": {"Inbox": {...}}}}:
//
//	{"Inbox": {
//		"WorkQueueUri":     "queue://configuration/orders",
//		"DeferredQueueUri": "queue://configuration/orders-deferred-web-1",
//		"ErrorQueueUri":    "queue://configuration/error",
//		"DurationToIgnoreOnFailure": ["00:00:10", "30s", "00:01:00"],
//		"MaximumFailureCount": 5
//	}}
//
// A queue URI names its queue by its last path segment ("queue://configuration/orders" is
// "orders"; "rabbitmq://shuttle/orders?durable=true" too); a URI without a path names it by its
// host ("queue://error"); a plain name is used as it is. WorkQueueUri sets WorkQueue,
// ErrorQueueUri ErrorQueue, and DeferredQueueUri DeferredQueue: whatever its name, that queue is
// this instance's deferred queue, never to be shared, so each instance's file names its own.
// Without one, messages waiting for a delayed retry go round the work queue, as in Shuttle, and
// code sets no Subscriber (see Config.DeferredQueue).
// Durations are Go durations or .NET TimeSpans (see ParseDuration); a malformed or negative one is
// an error naming the entry. MaximumFailureCount, a whole number from 1 (a JSON number or a string
// of digits, as .NET configuration binds either), sets MaximumFailureCount.
//
// The other keys of Shuttle's Inbox section — ThreadCount, DurationToSleepWhenIdle, Distribute,
// DistributeSendCount, DeferredMessageProcessorResetInterval,
// DeferredMessageProcessorWaitInterval and any other — are ignored: the router and the
// subscriber decide how messages are fetched, and the deferred queue is processed as the package
// documentation says. What the section leaves out, or gives as "", leaves cfg unchanged, so code
// can set the rest (Publisher, Subscriber, a DeferredQueue named after the host).
func ReadConfig(r io.Reader, cfg *Config) error {
	var file fileShape
	dec := json.NewDecoder(r)
	if err := dec.Decode(&file); err != nil {
		return fmt.Errorf("%w: not a JSON configuration file: %w", ErrInvalidConfig, err)
	}
	inbox := file.Inbox
	if file.Shuttle != nil && file.Shuttle.ServiceBus != nil && file.Shuttle.ServiceBus.Inbox != nil {
		inbox = file.Shuttle.ServiceBus.Inbox
	}
	if inbox == nil {
		return fmt.Errorf("%w: no Inbox section (expected {\"Inbox\": {...}} or {\"Shuttle\": {\"ServiceBus\": {\"Inbox\": {...}}}})", ErrInvalidConfig)
	}

	out := *cfg
	var err error
	if inbox.WorkQueueURI != "" {
		if out.WorkQueue, err = queueName("WorkQueueUri", inbox.WorkQueueURI); err != nil {
			return err
		}
	}
	if inbox.ErrorQueueURI != "" {
		if out.ErrorQueue, err = queueName("ErrorQueueUri", inbox.ErrorQueueURI); err != nil {
			return err
		}
	}
	if inbox.DeferredQueueURI != "" {
		if out.DeferredQueue, err = queueName("DeferredQueueUri", inbox.DeferredQueueURI); err != nil {
			return err
		}
	}
	if len(inbox.DurationToIgnoreOnFailure) > 0 && string(inbox.DurationToIgnoreOnFailure) != "null" {
		if out.DurationToIgnoreOnFailure, err = schedule(inbox.DurationToIgnoreOnFailure); err != nil {
			return err
		}
	}
	if len(inbox.MaximumFailureCount) > 0 && string(inbox.MaximumFailureCount) != "null" {
		if out.MaximumFailureCount, err = failureCount(inbox.MaximumFailureCount); err != nil {
			return err
		}
	}
	*cfg = out
	return nil
}

// failureCount reads MaximumFailureCount: a whole number from 1, as a JSON number or a string.
func failureCount(raw json.RawMessage) (int, error) {
	text := string(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		text = strings.TrimSpace(s)
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: MaximumFailureCount must be a whole number from 1 (1: no delayed retries), got %s",
			ErrInvalidConfig, raw)
	}
	return n, nil
}

// schedule reads DurationToIgnoreOnFailure: a list of duration strings.
func schedule(raw json.RawMessage) ([]time.Duration, error) {
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("%w: DurationToIgnoreOnFailure must be a list of durations, got %s", ErrInvalidConfig, raw)
	}
	out := make([]time.Duration, 0, len(entries))
	for i, entry := range entries {
		var text string
		if err := json.Unmarshal(entry, &text); err != nil {
			return nil, fmt.Errorf(`%w: DurationToIgnoreOnFailure[%d]: %s is not a duration: write it as a string, "10s" or "00:00:10"`,
				ErrInvalidConfig, i, entry)
		}
		d, err := parseDuration(text)
		if err != nil {
			return nil, fmt.Errorf("%w: DurationToIgnoreOnFailure[%d]: %q is not a duration: %w", ErrInvalidConfig, i, text, err)
		}
		if d < 0 {
			return nil, fmt.Errorf("%w: DurationToIgnoreOnFailure[%d]: %q is negative", ErrInvalidConfig, i, text)
		}
		out = append(out, d)
	}
	return out, nil
}

// queueName maps a Shuttle queue URI to a queue name.
func queueName(key, uri string) (string, error) {
	uri = strings.TrimSpace(uri)
	if !strings.Contains(uri, "://") {
		return uri, nil
	}
	u, err := url.Parse(uri)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %q is not a URI: %w", ErrInvalidConfig, key, uri, err)
	}
	name := u.Host
	if u.Path != "" {
		segments := strings.Split(strings.Trim(u.Path, "/"), "/")
		name = segments[len(segments)-1]
	}
	if name == "" {
		return "", fmt.Errorf("%w: %s: %q names no queue", ErrInvalidConfig, key, uri)
	}
	return name, nil
}
