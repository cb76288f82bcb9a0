package sqlstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

// TestParkReason: what text columns refuse becomes U+FFFD, and a long reason is cut on a
// character boundary at most persistence.MaxParkReasonLength bytes long.
func TestParkReason(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\uFFFDb\uFFFDc", ParkReason("a\xffb\x00c"))
	long := strings.Repeat("é", persistence.MaxParkReasonLength) // 2 bytes each
	cut := ParkReason(long)
	require.LessOrEqual(t, len(cut), persistence.MaxParkReasonLength)
	require.Greater(t, len(cut), persistence.MaxParkReasonLength-2)
	require.True(t, strings.HasPrefix(long, cut))
	require.Equal(t, "short", ParkReason("short"))
}

// TestValidInstance: an instance name is what every backend's text column keeps.
func TestValidInstance(t *testing.T) {
	t.Parallel()
	require.NoError(t, ValidInstance("instance-1"))
	for _, bad := range []string{"", strings.Repeat("x", persistence.MaxIDLength+1), "a\xff", "a\x00"} {
		require.ErrorIs(t, ValidInstance(bad), persistence.ErrInvalidTimeout, "%q", bad)
	}
}

// TestHoldsReleaseOnceAndAtClose: a hold's release runs once however often it is called, Close
// releases the holds still live, and a hold taken after Close is released at once and refused.
func TestHoldsReleaseOnceAndAtClose(t *testing.T) {
	t.Parallel()
	var h holds
	calls := map[string]int{}
	release := func(name string) func() error {
		return func() error { calls[name]++; return nil }
	}
	a, err := h.add(release("a"))
	require.NoError(t, err)
	_, err = h.add(release("b"))
	require.NoError(t, err)
	require.NoError(t, a())
	require.NoError(t, a())
	require.NoError(t, h.releaseAll())
	require.Equal(t, map[string]int{"a": 1, "b": 1}, calls)

	failed := errors.New("unlock failed")
	_, err = h.add(func() error { calls["c"]++; return failed })
	require.ErrorContains(t, err, "the store is closed")
	require.ErrorIs(t, err, failed)
	require.Equal(t, 1, calls["c"])
}
