package amqptransport_test

import (
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/transport/amqptransport"
)

// TestPublishesWaitingForConfirmsLeaveTheirChannelToOthers holds back everything the broker sends
// (its confirms among it) and publishes from 10 goroutines through a pool of one channel. All 10
// must be sent while none is confirmed: a Publish call keeps its channel only while sending, so
// one channel carries many unconfirmed messages. A pool that lent a channel until its messages
// were confirmed sends one and waits.
func TestPublishesWaitingForConfirmsLeaveTheirChannelToOthers(t *testing.T) {
	b := setup(t)
	proxy := newHoldingProxy(t, b.url)
	config := b.config
	config.URL = proxy.url
	config.ChannelPoolSize = 1
	pub := newPublisher(t, config)
	q := b.queue("pipe")

	require.NoError(t, pub.Publish(q, message.NewMessage(watermill.NewUUID(), []byte("first"))),
		"the first publish opens the pool's channel")
	require.Equal(t, int64(1), proxy.publishes())

	proxy.hold()
	const n = 10
	errs := make(chan error, n)
	for range n {
		go func() { errs <- pub.Publish(q, message.NewMessage(watermill.NewUUID(), []byte("held"))) }()
	}
	for deadline := time.Now().Add(10 * time.Second); proxy.publishes() < 1+n; time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline),
			"%d of %d publishes sent on the one channel while none was confirmed", proxy.publishes()-1, n)
	}
	select {
	case err := <-errs:
		t.Fatalf("a publish returned before its confirm could arrive: %v", err)
	default:
	}

	proxy.release()
	for range n {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("a publish was not confirmed after the broker's replies were let through")
		}
	}
	require.Eventually(t, func() bool { return b.count(t, q) == 1+n }, 10*time.Second, 20*time.Millisecond)
}

// holdingProxy relays one AMQP connection's bytes between a client and the broker. It counts the
// basic.publish frames the client sends, and can hold back what the broker sends (replies,
// confirms, deliveries) until released.
type holdingProxy struct {
	url     string
	sent    atomic.Int64
	mu      sync.Mutex
	held    bool
	resumed *sync.Cond
}

func newHoldingProxy(t *testing.T, brokerURL string) *holdingProxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	require.NoError(t, err)
	broker := u.Host
	if u.Port() == "" {
		broker = net.JoinHostPort(u.Hostname(), "5672")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u.Host = l.Addr().String()
	p := &holdingProxy{url: u.String()}
	p.resumed = sync.NewCond(&p.mu)

	var conns sync.WaitGroup
	var open []net.Conn
	var openMu sync.Mutex
	track := func(c net.Conn) {
		openMu.Lock()
		defer openMu.Unlock()
		open = append(open, c)
	}
	conns.Go(func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", broker)
			if err != nil {
				_ = client.Close()
				continue
			}
			track(client)
			track(server)
			conns.Go(func() { p.countPublishes(io.TeeReader(client, server)); _ = server.Close() })
			conns.Go(func() { p.relayHeld(client, server); _ = client.Close() })
		}
	})
	t.Cleanup(func() {
		p.release()
		_ = l.Close()
		openMu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		openMu.Unlock()
		conns.Wait()
	})
	return p
}

func (p *holdingProxy) publishes() int64 { return p.sent.Load() }

func (p *holdingProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = true
}

func (p *holdingProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	p.resumed.Broadcast()
}

// relayHeld copies the broker's bytes to the client, waiting while they are held.
func (p *holdingProxy) relayHeld(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		p.mu.Lock()
		for p.held {
			p.resumed.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// countPublishes reads the client's stream (as it is relayed) frame by frame: the protocol header,
// then frames of type, channel, size, payload and end octet. A method frame whose class and method
// are 60 and 40 is a basic.publish.
func (p *holdingProxy) countPublishes(r io.Reader) {
	if _, err := io.ReadFull(r, make([]byte, 8)); err != nil { // "AMQP" 0 0 9 1
		return
	}
	header := make([]byte, 7)
	for {
		if _, err := io.ReadFull(r, header); err != nil {
			return
		}
		payload := make([]byte, binary.BigEndian.Uint32(header[3:])+1)
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		const methodFrame = 1
		if header[0] == methodFrame && len(payload) >= 5 &&
			binary.BigEndian.Uint16(payload) == 60 && binary.BigEndian.Uint16(payload[2:]) == 40 {
			p.sent.Add(1)
		}
	}
}

// TestAMessageTheBrokerRefusesFailsAloneAndSaysWhy publishes a message larger than the broker's
// max_message_size (16 MiB, set by scripts/services.sh) while ten small ones share its channel
// (a pool of one). The broker closes the channel, which fails every confirm pending on it; the
// small ones are published again on a fresh channel and arrive, and the large one's error says
// why the broker closed the channel.
func TestAMessageTheBrokerRefusesFailsAloneAndSaysWhy(t *testing.T) {
	b := setup(t)
	config := b.config
	config.ChannelPoolSize = 1
	pub := newPublisher(t, config)
	q := b.queue("pipe")
	require.NoError(t, pub.Publish(q, message.NewMessage(watermill.NewUUID(), []byte("opens the channel"))))

	bigDone := make(chan error, 1)
	go func() { bigDone <- pub.Publish(q, message.NewMessage(watermill.NewUUID(), make([]byte, 17<<20))) }()
	const small = 10
	errs := make(chan error, small)
	for range small {
		go func() { errs <- pub.Publish(q, message.NewMessage(watermill.NewUUID(), []byte("small"))) }()
	}
	for range small {
		select {
		case err := <-errs:
			require.NoError(t, err, "a message the broker accepts is not failed by another's")
		case <-time.After(30 * time.Second):
			t.Fatal("a small publish did not return")
		}
	}
	select {
	case err := <-bigDone:
		if err == nil {
			t.Skip("this broker accepts a 17 MiB message: give it max_message_size = 16777216, as scripts/services.sh does")
		}
		require.ErrorIs(t, err, amqptransport.ErrNotConfirmed)
		require.ErrorContains(t, err, "larger than configured max size", "the error says why the broker refused it")
	case <-time.After(30 * time.Second):
		t.Fatal("the large publish did not return")
	}
	require.Eventually(t, func() bool { return b.count(t, q) == 1+small }, 10*time.Second, 20*time.Millisecond)
}
