package nats

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIDTokensAreValidSubjectTokensAndDistinct(t *testing.T) {
	ids := []string{"a", "A", "0", "-", "_", "uuid-1234", "with.dot", "with space", "*", ">", "~", "~YQ", "YQ", "a", "日本", "\x00", "%", "a.b", "a_b", "ab"}
	seen := map[string]string{}
	for _, id := range ids {
		tok, err := idToken(id)
		require.NoError(t, err, id)
		require.NoError(t, validateSubject("p."+tok), "token %q of %q", tok, id)
		assert.NotContains(t, tok, ".")
		if other, ok := seen[tok]; ok && other != id {
			t.Fatalf("ids %q and %q share token %q", other, id, tok)
		}
		seen[tok] = id
	}
	tok, _ := idToken("7f2c9a4e-1b3d-4e5f-8a9b-0c1d2e3f4a5b")
	assert.Equal(t, "7f2c9a4e-1b3d-4e5f-8a9b-0c1d2e3f4a5b", tok, "UUIDs stay readable")
}

func FuzzIDToken(f *testing.F) {
	f.Add("uuid", "with.dot")
	f.Add("~YQ", "a")
	f.Fuzz(func(t *testing.T, a, b string) {
		ta, errA := idToken(a)
		tb, errB := idToken(b)
		if errA != nil || errB != nil {
			return
		}
		if err := validateSubject("p." + ta); err != nil && len(ta) <= 240 {
			t.Fatalf("token %q of %q: %v", ta, a, err)
		}
		if strings.ContainsAny(ta, ".*> \t\r\n") {
			t.Fatalf("token %q of %q is not one plain token", ta, a)
		}
		if a != b && ta == tb {
			t.Fatalf("ids %q and %q share token %q", a, b, ta)
		}
	})
}

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		filter, subject string
		want            bool
	}{
		{"a.>", "a.b", true}, {"a.>", "a.b.c", true}, {"a.>", "a", false}, {"a.*", "a.b", true},
		{"a.*", "a.b.c", false}, {"a.b", "a.b", true}, {"a.b", "a.c", false}, {"a.*.c", "a.b.c", true},
		{">", "x", true}, {"a.>", "a.>", true}, {"a.*", "a.>", false}, {"s.p.>", "s.p.x.y", true},
	} {
		assert.Equal(t, c.want, subjectMatches(c.filter, c.subject), "%s ~ %s", c.filter, c.subject)
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	var c Config
	require.ErrorIs(t, c.Validate(), ErrInvalidConfig)
	c.URL = "nats://user:secret@localhost:4222,nats://localhost:4223"
	require.NoError(t, c.Validate())
	c.setDefaults()
	assert.Equal(t, DefaultStream, c.Stream)
	assert.Equal(t, DefaultSubjectPrefix, c.SubjectPrefix)
	assert.Equal(t, 1, c.Replicas)
	for _, bad := range []Config{
		{URL: "amqp://x"},
		{URL: "nats://x", Stream: "has.dot"},
		{URL: "nats://x", SubjectPrefix: "a.>"},
		{URL: "nats://x", Replicas: 7},
		{URL: "nats://x", AckTimeout: -1},
	} {
		err := bad.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", bad)
		assert.NotContains(t, err.Error(), "secret")
	}
}
