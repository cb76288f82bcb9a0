package amqpconn_test

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/amqpconn"
	"github.com/timeoutmill/timeoutmill/internal/testenv"
)

// fast reconnects within milliseconds, so that the tests wait for behaviour, not for backoff.
var fast = amqpconn.Backoff{Initial: 10 * time.Millisecond, Multiplier: 2, Max: 50 * time.Millisecond}

func TestAConnectionTheBrokerDropsIsMadeAgain(t *testing.T) {
	t.Parallel()
	p := newProxy(t, testenv.AMQPURL(t))
	c, err := amqpconn.Dial(p.url, amqp.Config{}, fast, nil)
	require.NoError(t, err)
	defer c.Close()
	first, err := c.Current()
	require.NoError(t, err)

	for range 3 {
		p.dropAll()
		var again *amqp.Connection
		require.Eventually(t, func() bool {
			again, err = c.Current()
			return err == nil && again != first
		}, 10*time.Second, 5*time.Millisecond, "a new connection after the old one was dropped")
		ch, err := again.Channel()
		require.NoError(t, err, "the new connection works")
		require.NoError(t, ch.Close())
		first = again
	}
}

func TestWhileTheBrokerIsAwayCurrentSaysSoAndCloseDoesNotWait(t *testing.T) {
	t.Parallel()
	p := newProxy(t, testenv.AMQPURL(t))
	c, err := amqpconn.Dial(p.url, amqp.Config{}, fast, nil)
	require.NoError(t, err)

	p.refuse(true)
	p.dropAll()
	require.Eventually(t, func() bool {
		_, err := c.Current()
		return errors.Is(err, amqpconn.ErrNotConnected)
	}, 10*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // a few refused attempts
	_, err = c.Current()
	require.ErrorIs(t, err, amqpconn.ErrNotConnected, "no connection while the broker refuses")

	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a broker that is away")
	}
	_, err = c.Current()
	require.ErrorIs(t, err, amqpconn.ErrClosed)
	require.NoError(t, c.Close(), "a second Close is harmless")
}

func TestDialFailsWhenTheBrokerCannotBeReached(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	_, err = amqpconn.Dial("amqp://guest:guest@"+addr+"/", amqp.Config{}, fast, nil)
	require.Error(t, err)
}

// proxy relays connections to the broker, and can drop them all or refuse new ones.
type proxy struct {
	url string

	mu      sync.Mutex
	conns   []net.Conn
	refused bool
}

func newProxy(t *testing.T, brokerURL string) *proxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	require.NoError(t, err)
	broker := u.Host
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u.Host = l.Addr().String()
	p := &proxy{url: u.String()}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			refused := p.refused
			p.mu.Unlock()
			if refused {
				_ = client.Close()
				continue
			}
			server, err := net.Dial("tcp", broker)
			if err != nil {
				_ = client.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, client, server)
			p.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(server, client); _ = server.Close() })
			wg.Go(func() { _, _ = io.Copy(client, server); _ = client.Close() })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		p.dropAll()
		wg.Wait()
	})
	return p
}

// dropAll closes every relayed connection, as a broker restart does.
func (p *proxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// refuse makes the proxy close new connections at once.
func (p *proxy) refuse(yes bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused = yes
}

// relayed is how many connections the proxy relays now.
func (p *proxy) relayed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

func TestAClusterConnectionMovesToTheNextNodeWhenItsNodeGoes(t *testing.T) {
	t.Parallel()
	// Two proxies to one broker stand for two nodes of a cluster.
	node1, node2 := newProxy(t, testenv.AMQPURL(t)), newProxy(t, testenv.AMQPURL(t))
	c, err := amqpconn.Dial(node1.url+","+node2.url, amqp.Config{}, fast, nil)
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, 1, node1.relayed(), "the first node that answers")
	require.Zero(t, node2.relayed())

	node1.refuse(true) // node 1 stops
	node1.dropAll()
	require.Eventually(t, func() bool {
		_, err := c.Current()
		return err == nil && node2.relayed() == 1
	}, 10*time.Second, 5*time.Millisecond, "connected again, to node 2")
	conn, err := c.Current()
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err, "the new connection works")
	require.NoError(t, ch.Close())

	node1.refuse(false) // node 1 is back, node 2 stops: back to node 1
	node2.refuse(true)
	node2.dropAll()
	require.Eventually(t, func() bool {
		_, err := c.Current()
		return err == nil && node1.relayed() == 1
	}, 10*time.Second, 5*time.Millisecond, "connected again, to node 1")
}

func TestDialTriesEachNodeOfAClusterInTurn(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "amqp://guest:topsecret@" + l.Addr().String() + "/"
	require.NoError(t, l.Close())
	live := newProxy(t, testenv.AMQPURL(t))

	c, err := amqpconn.Dial(dead+" , "+live.url, amqp.Config{}, fast, nil)
	require.NoError(t, err, "the second node answers")
	require.NoError(t, c.Close())

	_, err = amqpconn.Dial(dead+","+dead, amqp.Config{}, fast, nil)
	require.ErrorContains(t, err, "no node of the cluster answered")
	require.NotContains(t, amqpconn.RedactError(err, dead+","+dead).Error(), "topsecret")
}

func TestSplitURLs(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"amqp://u:p@h1:5672/":                          {"amqp://u:p@h1:5672/"},
		"amqp://u:p@h1:5672/,amqp://u:p@h2:5673/":      {"amqp://u:p@h1:5672/", "amqp://u:p@h2:5673/"},
		"amqp://u:p@h1/, AMQPS://u:p@h2/ ":             {"amqp://u:p@h1/", "AMQPS://u:p@h2/"},
		"amqp://u:pa,ss@h1/,amqp://u:pa,ss@h2/":        {"amqp://u:pa,ss@h1/", "amqp://u:pa,ss@h2/"},
		"amqp://u:p@h1/vhost,with,commas":              {"amqp://u:p@h1/vhost,with,commas"},
		"":                                             {""},
		"amqp://u:p@h1/,amqp://u:p@h2/,amqp://u:p@h3/": {"amqp://u:p@h1/", "amqp://u:p@h2/", "amqp://u:p@h3/"},
	} {
		require.Equal(t, want, amqpconn.SplitURLs(in), in)
	}
}
