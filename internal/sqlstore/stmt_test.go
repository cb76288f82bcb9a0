package sqlstore

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pair are the inputs of a test statement: @a and @b.
type pair struct {
	A string
	B int
}

func (p pair) Bind(b *Binder) {
	b.Text("a", p.A)
	b.Int("b", p.B)
}

// TestCompileStyles: one text, written with names, is sent in each style, with its arguments in
// the places the style wants; a name used twice is sent twice with ?, once with $n and @name.
func TestCompileStyles(t *testing.T) {
	t.Parallel()
	const text = `UPDATE t SET x = @b WHERE a = @a AND y <> @b`
	for _, c := range []struct {
		style Style
		sql   string
		args  []any
	}{
		{Positional, `UPDATE t SET x = ? WHERE a = ? AND y <> ?`, []any{int64(2), "one", int64(2)}},
		{Numbered, `UPDATE t SET x = $1 WHERE a = $2 AND y <> $1`, []any{int64(2), "one"}},
		{Named, text, []any{sql.Named("b", int64(2)), sql.Named("a", "one")}},
	} {
		st, err := Compile[pair](&Binding{Style: c.style}, text)
		require.NoError(t, err, c.style)
		require.Equal(t, c.sql, st.SQL, c.style)
		require.Equal(t, c.args, st.Args(pair{A: "one", B: 2}), c.style)
	}
}

// TestCompileRefusesNamesThatDoNotMatch: a name the statement uses that its Params do not give,
// or one they give that it does not use, fails Compile (and so New) rather than a statement at
// run time; so does a name misspelt.
func TestCompileRefusesNamesThatDoNotMatch(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		`SELECT 1 WHERE a = @a AND b = @b AND c = @c`: "uses @c",
		`SELECT 1 WHERE a = @a`:                       "gives @b",
		`SELECT 1 WHERE a = @a AND b = @bb`:           "uses @bb",
		`SELECT 1 WHERE a = '@a' AND b = @b`:          "gives @a",
	} {
		for _, style := range []Style{Positional, Numbered, Named} {
			_, err := Compile[pair](&Binding{Style: style}, text)
			require.ErrorContains(t, err, want, text)
		}
	}
}

// TestCompileSkipsQuotesAndComments: an @ inside a string, a quoted name or a comment is text, and
// @@ROWCOUNT is T-SQL's, not a parameter; a quote left open is an error.
func TestCompileSkipsQuotesAndComments(t *testing.T) {
	t.Parallel()
	text := "INSERT INTO \"s@x\".[t@]]y] (`c@d`, e) SELECT @a, '@b it''s' -- @c\n/* @d */ WHERE @b > 0; SELECT @@ROWCOUNT;"
	st, err := Compile[pair](&Binding{Style: Positional}, text)
	require.NoError(t, err)
	require.Equal(t, "INSERT INTO \"s@x\".[t@]]y] (`c@d`, e) SELECT ?, '@b it''s' -- @c\n/* @d */ WHERE ? > 0; SELECT @@ROWCOUNT;", st.SQL)
	require.Equal(t, []any{"x", int64(1)}, st.Args(pair{A: "x", B: 1}))

	for _, open := range []string{`SELECT 'a`, `SELECT "a`, "SELECT `a", `SELECT [a`, `SELECT /* a`} {
		_, err := Compile[NoParams](&Binding{}, open)
		require.Error(t, err, open)
	}
}

// TestCompileEmpty: an empty statement (a dialect's "none") compiles to one with no SQL, whatever
// its Params.
func TestCompileEmpty(t *testing.T) {
	t.Parallel()
	st, err := Compile[KeyParams](&Binding{Style: Numbered}, "")
	require.NoError(t, err)
	require.Empty(t, st.SQL)
}

// TestArgsConvertAsTheBindingSays: values reach the driver as the dialect's Binding converts
// them, NULL for an empty NullText.
func TestArgsConvertAsTheBindingSays(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	text := `UPDATE t SET available_at = @until, claimed_by = @by WHERE available_at <= @now LIMIT @limit`
	binding := &Binding{Style: Positional, BinaryText: true, Times: TimeText}
	st, err := Compile[ClaimParams](binding, text)
	require.NoError(t, err)
	require.Equal(t, []any{"2030-01-02 02:04:05.000006", []byte("i"), "2030-01-02 02:04:05.000006", int64(3)},
		st.Args(ClaimParams{Now: at, Until: at, Limit: 3, By: "i"}))
	require.Equal(t, []any{"2030-01-02 02:04:05.000006", nil, "2030-01-02 02:04:05.000006", int64(3)},
		st.Args(ClaimParams{Now: at, Until: at, Limit: 3}), "no claiming instance is NULL")
}
