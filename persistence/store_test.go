package persistence_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

func TestTimeoutValidate(t *testing.T) {
	t.Parallel()
	ok := persistence.Timeout{ID: "id", Destination: "d", Due: time.Now()}
	require.NoError(t, ok.Validate())

	for name, mutate := range map[string]func(*persistence.Timeout){
		"empty id":        func(t *persistence.Timeout) { t.ID = "" },
		"long id":         func(t *persistence.Timeout) { t.ID = string(make([]byte, 251)) },
		"no destination":  func(t *persistence.Timeout) { t.Destination = "" },
		"zero due":        func(t *persistence.Timeout) { t.Due = time.Time{} },
		"before 1970":     func(t *persistence.Timeout) { t.Due = time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC) },
		"after year 9999": func(t *persistence.Timeout) { t.Due = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
	} {
		bad := ok
		mutate(&bad)
		require.ErrorIs(t, bad.Validate(), persistence.ErrInvalidTimeout, name)
	}
}

func TestMetadataRoundTripIsExact(t *testing.T) {
	t.Parallel()
	md := map[string]string{"": "", "ü": "\xff\x00bytes", "k": "v"}
	got, err := persistence.DecodeMetadata(persistence.EncodeMetadata(md))
	require.NoError(t, err)
	require.Equal(t, md, got)

	_, err = persistence.DecodeMetadata([]byte{9, 1})
	require.ErrorIs(t, err, persistence.ErrCorruptMetadata)
	_, err = persistence.DecodeMetadata(persistence.EncodeMetadata(md)[:5])
	require.ErrorIs(t, err, persistence.ErrCorruptMetadata)
}
