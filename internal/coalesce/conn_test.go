package coalesce

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowConn is a connection whose writes take a while, as a busy kernel's or a full socket's do.
type slowConn struct {
	net.Conn
	delay time.Duration
}

func (s slowConn) Write(p []byte) (int, error) {
	time.Sleep(s.delay)
	return s.Conn.Write(p)
}

// TestManyWritersBytesArriveWholeAndInOrder: each writer's records arrive complete, in its order,
// none lost, and far fewer system calls carry them than there were writes.
func TestManyWritersBytesArriveWholeAndInOrder(t *testing.T) {
	t.Parallel()
	const writers, records = 8, 500
	client, server := net.Pipe()
	c := New(slowConn{Conn: client, delay: 200 * time.Microsecond}, 0)
	var got [writers][]uint32
	read := make(chan error, 1)
	go func() {
		r := bufio.NewReader(server)
		var rec [8]byte
		for range writers * records {
			if _, err := io.ReadFull(r, rec[:]); err != nil {
				read <- err
				return
			}
			w, seq := binary.BigEndian.Uint32(rec[:4]), binary.BigEndian.Uint32(rec[4:])
			got[w] = append(got[w], seq)
		}
		read <- nil
	}()
	var (
		wg   sync.WaitGroup
		lock sync.Mutex // amqp091 writes a message's frames under its connection's lock
	)
	for w := range writers {
		wg.Go(func() {
			for seq := range records {
				var rec [8]byte
				binary.BigEndian.PutUint32(rec[:4], uint32(w))
				binary.BigEndian.PutUint32(rec[4:], uint32(seq))
				lock.Lock()
				n, err := c.Write(rec[:4]) // a frame's header, then its body
				if err == nil {
					_, err = c.Write(rec[4:])
				}
				lock.Unlock()
				if !assert.NoError(t, err) || !assert.Equal(t, 4, n) {
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, <-read)
	for w := range writers {
		require.Len(t, got[w], records)
		for i, seq := range got[w] {
			require.Equal(t, uint32(i), seq, "writer %d's records out of order", w)
		}
	}
	require.NoError(t, c.Close())
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("%d writes in %d system calls", 2*writers*records, c.sends)
	require.Less(t, c.sends, writers*records, "writes made while a send was in the kernel go out together")
}

// failingConn fails every write and records whether it was closed.
type failingConn struct {
	net.Conn
	closed chan struct{}
	once   sync.Once
}

var errBroken = errors.New("broken pipe")

func (f *failingConn) Write([]byte) (int, error) { return 0, errBroken }
func (f *failingConn) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// TestAFailedSendFailsLaterWritesAndClosesTheConnection: the writer learns of the failure at its
// next write, and the connection is closed so that its reader fails at once too.
func TestAFailedSendFailsLaterWritesAndClosesTheConnection(t *testing.T) {
	t.Parallel()
	client, _ := net.Pipe()
	f := &failingConn{Conn: client, closed: make(chan struct{})}
	c := New(f, 0)
	_, err := c.Write([]byte("lost"))
	require.NoError(t, err, "buffered: the failure comes later")
	select {
	case <-f.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed after its send failed")
	}
	_, err = c.Write([]byte("more"))
	require.ErrorIs(t, err, errBroken)
	require.NoError(t, c.Close())
}

// TestCloseSendsWhatWasWrittenBeforeIt: a connection's last words (AMQP's connection.close) are
// sent before it closes.
func TestCloseSendsWhatWasWrittenBeforeIt(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	c := New(slowConn{Conn: client, delay: 10 * time.Millisecond}, 0)
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(server)
		read <- b
	}()
	for _, s := range []string{"one ", "two ", "three"} {
		_, err := c.Write([]byte(s))
		require.NoError(t, err)
	}
	require.NoError(t, c.Close())
	require.Equal(t, "one two three", string(<-read))
	_, err := c.Write([]byte("after"))
	require.ErrorIs(t, err, net.ErrClosed)
}

// TestWritersWaitWhileTooMuchIsPending: a peer that does not read holds writers back, as a full
// socket does, rather than letting the buffer grow; they go on once it reads.
func TestWritersWaitWhileTooMuchIsPending(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe() // unbuffered: a send waits for the reader
	c := New(client, 16)
	for range 2 {
		_, err := c.Write(make([]byte, 16)) // the first is taken by the sender, the second pends
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending) == 16
	}, 10*time.Second, time.Millisecond)
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		_, _ = c.Write(make([]byte, 1))
	}()
	select {
	case <-blocked:
		t.Fatal("a write went through with the maximum pending")
	case <-time.After(100 * time.Millisecond):
	}
	go func() { _, _ = io.Copy(io.Discard, server) }()
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer still waits after the peer read")
	}
	require.NoError(t, c.Close())
}
