package acceptance

import (
	"net/url"
	"os"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/stretchr/testify/require"
)

// The network-fault tests (fault_network_test.go) put Shopify's toxiproxy between a timeoutmill
// process and its servers: scripts/services.sh runs it on loopback and writes its API's address
// into the env file. Each test creates proxies of its own, under names of its own, and deletes
// them when it ends; the test's own clients connect to the servers directly.

// toxiproxyURLEnv names toxiproxy's HTTP API (scripts/services.sh up toxiproxy).
const toxiproxyURLEnv = "TIMEOUTMILL_TEST_TOXIPROXY_URL"

// newToxiproxy returns a client of the toxiproxy the env file names, or skips t (fails it under
// CI, where `make test` starts it) when there is none or it does not answer.
func newToxiproxy(t *testing.T) *toxiproxy.Client {
	t.Helper()
	api := os.Getenv(toxiproxyURLEnv)
	msg := ""
	if api == "" {
		msg = toxiproxyURLEnv + " is not set, so no toxiproxy to put faults on the network with; `make test` starts it " +
			"(or run scripts/services.sh up toxiproxy and source the env file it prints)"
	}
	c := toxiproxy.NewClient(api)
	if api != "" {
		if _, err := c.Version(); err != nil {
			msg = "toxiproxy at " + api + " does not answer (scripts/services.sh up toxiproxy starts it): " + err.Error()
		}
	}
	if msg != "" {
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return c
}

// faultProxy is one toxiproxy proxy to a server, listening on a free loopback port.
type faultProxy struct {
	*toxiproxy.Proxy
	toxics []string // names of the toxics added and not removed
}

// newFaultProxy creates a proxy to upstream (host:port) named after tag, and deletes it (which
// closes every connection through it) when t ends.
func newFaultProxy(t *testing.T, c *toxiproxy.Client, tag, upstream string) *faultProxy {
	t.Helper()
	name := "tm-" + tag + "-" + randomHex(t, 4)
	p, err := c.CreateProxy(name, "127.0.0.1:0", upstream)
	require.NoError(t, err, "creating toxiproxy proxy %s to %s", name, upstream)
	t.Cleanup(func() {
		if err := p.Delete(); err != nil {
			t.Logf("deleting toxiproxy proxy %s: %v", name, err)
		}
	})
	return &faultProxy{Proxy: p}
}

// via returns rawURL (a postgres:// DSN or an amqp:// URL) with its host and port replaced by
// the proxy's.
func (p *faultProxy) via(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	u.Host = p.Listen
	return u.String()
}

// add adds a toxic of type kind to the given streams ("upstream": towards the server,
// "downstream": towards the client) with attrs; it affects the connections through the proxy at
// once, those open and those to come.
func (p *faultProxy) add(t *testing.T, kind string, attrs toxiproxy.Attributes, streams ...string) {
	t.Helper()
	for _, stream := range streams {
		name := kind + "_" + stream
		_, err := p.AddToxic(name, kind, stream, 1, attrs)
		require.NoError(t, err, "adding toxic %s to %s", name, p.Name)
		p.toxics = append(p.toxics, name)
	}
}

// clear removes every toxic added: the network is sound again.
func (p *faultProxy) clear(t *testing.T) {
	t.Helper()
	for _, name := range p.toxics {
		require.NoError(t, p.RemoveToxic(name), "removing toxic %s from %s", name, p.Name)
	}
	p.toxics = nil
}
