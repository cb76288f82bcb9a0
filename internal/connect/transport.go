package connect

import (
	"context"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// TransportSchemes lists the transport URLs OpenTransport understands, for help texts.
const TransportSchemes = "amqp://user:pass@host:5672/vhost (or amqps://)"

// Transport is a Pub/Sub with queue semantics for an endpoint's queues.
type Transport struct {
	Publisher  message.Publisher
	Subscriber message.Subscriber
	// DeclareEndpoint creates the endpoint's queues and the error queue (the installers); nil
	// where the transport needs none.
	DeclareEndpoint func(ctx context.Context, endpoint, errorQueue string) error
}

// Close closes the publisher and the subscriber.
func (t *Transport) Close() error {
	perr := t.Publisher.Close()
	serr := t.Subscriber.Close()
	if perr != nil {
		return perr
	}
	return serr
}

// OpenTransport connects to the broker a URL names. Watermill's in-process GoChannel is refused:
// a separate process cannot share it.
func OpenTransport(_ context.Context, rawURL string, logger watermill.LoggerAdapter) (*Transport, error) {
	scheme, _, _ := strings.Cut(rawURL, ":")
	switch strings.ToLower(scheme) {
	case "amqp", "amqps":
		cfg := amqptransport.Config{URL: rawURL}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("%w: transport: %w", ErrInvalid, err)
		}
		pub, sub, err := amqptransport.New(cfg, logger)
		if err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", Redact(rawURL), RedactError(err, rawURL))
		}
		return &Transport{Publisher: pub, Subscriber: sub, DeclareEndpoint: pub.DeclareEndpoint}, nil
	case "gochannel":
		return nil, fmt.Errorf("%w: transport %q: Watermill's GoChannel lives inside one process, so a separate timeoutmill process cannot share it; "+
			"embed timeouts.Manager in your program instead, or use %s", ErrUnsupported, rawURL, TransportSchemes)
	default:
		return nil, fmt.Errorf("%w: transport %q: expected %s", ErrUnsupported, Redact(rawURL), TransportSchemes)
	}
}
