package sqlserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence/sqlserver"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := []sqlserver.Config{
		{Endpoint: "orders"},
		{Table: "t"},
		{Endpoint: strings.Repeat("e", 128-len(".timeouts"))},
		{Endpoint: strings.Repeat("日", 128-len(".timeouts"))},
		{Endpoint: `it's [fine]; DROP TABLE x; --`},
		{Table: "t", Schema: "s]'", MaxOpenConns: 3},
		{Table: " leading space", Schema: "#schema"},
	}
	for _, c := range valid {
		require.NoError(t, c.Validate(), "%+v", c)
	}
	refused := map[string]sqlserver.Config{
		"Endpoint or Table must be set":   {},
		"longer than 128 UTF-16 code":     {Endpoint: strings.Repeat("e", 128-len(".timeouts")+1)},
		"Endpoint may have at most 119":   {Endpoint: strings.Repeat("🚀", 60)}, // 120 code units, then .timeouts
		"NUL":                             {Table: "a\x00b"},
		"not valid UTF-8":                 {Table: "a\xffb"},
		"ends with a space":               {Table: "t "},
		"temporary table":                 {Table: "#t"},
		"Schema":                          {Table: "t", Schema: strings.Repeat("s", 129)},
		"MaxOpenConns cannot be negative": {Table: "t", MaxOpenConns: -1},
	}
	for want, c := range refused {
		err := c.Validate()
		require.ErrorContains(t, err, want, "%+v", c)
		require.ErrorContains(t, err, "sqlserver: invalid config")
		_, err = sqlserver.New(&sql.DB{}, c)
		require.ErrorContains(t, err, want, "New refuses it too")
		_, err = sqlserver.Open(t.Context(), c)
		require.ErrorContains(t, err, want, "Open refuses it too")
		_, err = sqlserver.SetupScript(c)
		require.ErrorContains(t, err, want, "SetupScript refuses it too")
	}
	_, err := sqlserver.Open(t.Context(), sqlserver.Config{Endpoint: "orders"})
	require.ErrorContains(t, err, "DSN must be set")
	_, err = sqlserver.New(nil, sqlserver.Config{Endpoint: "orders"})
	require.ErrorContains(t, err, "db is nil")
}

// TestErrorsNeverShowThePassword: whatever is wrong with a DSN, or with the server it points at,
// the error says which, and never shows the password, as written or escaped.
func TestErrorsNeverShowThePassword(t *testing.T) {
	t.Parallel()
	const secret = "S3cr3t-p@ss word"
	escaped := url.QueryEscape(secret)
	pathEscaped := url.PathEscape(secret)
	userinfo := url.UserPassword("sa", secret).String()
	for _, tc := range []struct {
		name, dsn, want string
	}{
		{"URL with a bad port", "sqlserver://" + userinfo + "@127.0.0.1:port", "invalid config: DSN"},
		{"URL with a raw password", "sqlserver://sa:" + secret + "@127.0.0.1:1433%zz", "invalid config: DSN"},
		{"URL whose bad value is the password", "sqlserver://" + userinfo + "@127.0.0.1?dial+timeout=" + escaped, "invalid config: DSN"},
		{"URL with password= in the query", "sqlserver://127.0.0.1?user+id=sa&password=" + escaped + "&connection+timeout=" + escaped, "invalid config: DSN"},
		{"ADO", "server=127.0.0.1;user id=sa;password=" + secret + ";port=" + secret, "invalid config: DSN"},
		{"ADO, quoted", `server=127.0.0.1;user id=sa;password="` + secret + `";port=` + secret, "invalid config: DSN"},
		{"ODBC, braced", "odbc:server=127.0.0.1;uid=sa;pwd={" + secret + "};port=" + secret, "invalid config: DSN"},
		{"ODBC, unparsable", "odbc:server=127.0.0.1;pwd={" + secret, "invalid config: DSN"},
		{"nothing listening", "sqlserver://" + userinfo + "@127.0.0.1:1?dial+timeout=5&connection+timeout=5", "connect to 127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			store, err := sqlserver.Open(ctx, sqlserver.Config{DSN: tc.dsn, Endpoint: "orders"})
			if store != nil {
				_ = store.Close()
			}
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
			for _, form := range []string{secret, escaped, pathEscaped, "S3cr3t"} {
				for _, msg := range []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err)} {
					require.NotContains(t, msg, form, "the error shows the password")
				}
			}
		})
	}
}

func TestConfigStringHidesThePassword(t *testing.T) {
	t.Parallel()
	config := sqlserver.Config{
		DSN:      "sqlserver://sa:" + url.PathEscape("S3cr3t pw") + "@db.internal:1433?database=app",
		Endpoint: "orders",
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		s := fmt.Sprintf(format, config)
		require.NotContains(t, s, "S3cr3t", format)
		require.Contains(t, s, "db.internal:1433?database=app", format)
		require.Contains(t, s, `Endpoint: "orders"`, format)
	}
}
