package sqlserver

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/persistence"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the statements")

// hostile is a config whose names are made to break out of brackets and string literals: a
// quote, a ], a [, a semicolon and a comment, in the schema and in the endpoint.
func hostile() Config {
	return Config{
		Schema:   `sch]ema'; DROP TABLE x; --`,
		Endpoint: `it's [the] "orders"]; DROP TABLE x; --`,
	}
}

// goldenCases are the configs whose SQL is kept in testdata.
func goldenCases() map[string]Config {
	return map[string]Config{
		"default": {Endpoint: "orders"},
		"hostile": hostile(),
	}
}

func queriesFor(t *testing.T, config Config) queries {
	t.Helper()
	config.setDefaults()
	require.NoError(t, config.Validate())
	return newQueries(config.Schema, config.Table)
}

// render writes every statement under a -- name: header.
func render(q queries) string {
	var b strings.Builder
	for _, st := range statements(q) {
		b.WriteString("-- name: " + st.name + "\n" + strings.TrimRight(st.sql, "\n") + "\n\n")
	}
	return b.String()
}

// TestGolden keeps every statement, for the default names and for hostile ones, in
// testdata/<case>.sql, so that a change to the SQL is a change a reviewer reads. Run
// `go test -run TestGolden -update` to rewrite them.
func TestGolden(t *testing.T) {
	t.Parallel()
	for name, config := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := render(queriesFor(t, config))
			path := filepath.Join("testdata", name+".sql")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -run TestGolden -update to write it")
			require.Equal(t, string(want), got, "%s differs from the statements (-update rewrites it)", path)
		})
	}
}

// TestStatementsParse checks each statement as far as Go can tell without a server (see
// checkStatement), and that it needs the parameters the store binds (which the fake driver's
// tests check against what the store binds in fact).
func TestStatementsParse(t *testing.T) {
	t.Parallel()
	wantParams := map[string][]string{
		"setupSchema":           nil,
		"setupTable":            nil,
		"installed":             nil,
		"lockSetup":             nil,
		"store":                 {"destination", "due", "failureCount", "headers", "id", "owner", "state"},
		"next":                  nil,
		"now":                   nil,
		"claim":                 {"by", "limit", "now", "until"},
		"peek":                  {"id"},
		"delete":                {"id"},
		"incrementFailureCount": {"id"},
		"cancelByOwner":         {"owner"},
		"addKey":                nil,
		"keyIndex":              nil,
		"stats":                 {"now"},
		"statsByDestination":    nil,
		"exists":                {"id"},
		"keyHolder":             {"key"},
		"dropKey":               {"id"},
		"schedule":              {"destination", "due", "failureCount", "headers", "id", "key", "owner", "state"},
		"reschedule":            {"due", "id", "now"},
		"list":                  {"limit"},
		"listFiltered":          {"afterDue", "afterID", "destination", "dueBefore", "dueFrom", "key", "limit", "owner"},
		"storeMany(2)": {"destination0", "destination1", "due0", "due1", "failureCount0", "failureCount1",
			"headers0", "headers1", "id0", "id1", "owner0", "owner1", "state0", "state1"},
		"peekMany(2)":         {"id0", "id1"},
		"removeMany(2)":       {"id0", "id1"},
		"releaseMany(2)":      {"id0", "id1"},
		"addParked":           nil,
		"claimedByIndex":      nil,
		"park":                {"id", "parkedAt", "reason"},
		"releaseClaimsOf":     {"hiddenFrom", "instance"},
		"holdInstance":        {"resource"},
		"releaseInstance":     {"resource"},
		"unparkMany(2)":       {"id0", "id1"},
		"deleteParkedMany(2)": {"id0", "id1"},
	}
	for name, config := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			config.setDefaults()
			q := newQueries(config.Schema, config.Table)
			cols, err := tableColumns(q.setupTable)
			require.NoError(t, err)
			names := make([]string, len(cols))
			for i, c := range cols {
				names[i] = c.name
			}
			for _, st := range statements(q) {
				params, err := checkStatement(st.sql, config.Schema, config.Table, names)
				require.NoError(t, err, "%s:\n%s", st.name, st.sql)
				require.Equal(t, wantParams[st.name], params, "%s: parameters", st.name)
			}
		})
	}
}

// TestHostileNamesChangeOnlyNames: with hostile names, every statement has the shape it has with
// the default names, token for token; only the contents of the brackets differ. A name that broke
// out of its brackets or of a string literal would add tokens.
func TestHostileNamesChangeOnlyNames(t *testing.T) {
	t.Parallel()
	hostile := hostile()
	plain := statements(queriesFor(t, Config{Endpoint: "orders"}))
	evil := statements(queriesFor(t, hostile))
	for i := range plain {
		want, err := shape(plain[i].sql, "dbo", "orders.timeouts")
		require.NoError(t, err, plain[i].name)
		got, err := shape(evil[i].sql, hostile.Schema, hostile.Endpoint+".timeouts")
		require.NoError(t, err, evil[i].name)
		require.Equal(t, want, got, "%s: shape with hostile names", plain[i].name)
	}
	// And the names come back whole from their brackets and literals.
	q := queriesFor(t, hostile)
	toks, err := lex(q.peek)
	require.NoError(t, err)
	var bracketed []string
	for _, tok := range toks {
		if tok.kind == tokBracket {
			bracketed = append(bracketed, tok.text)
		}
	}
	require.Equal(t, []string{hostile.Schema, hostile.Endpoint + ".timeouts"}, bracketed)
}

// TestLexerCatchesBreakouts shows that the checks would fail for SQL made the wrong way: a name
// pasted raw, quoted without doubling, or with a typo.
func TestLexerCatchesBreakouts(t *testing.T) {
	t.Parallel()
	cols := []string{"Id"}
	for name, sql := range map[string]string{
		"] not doubled":        `DELETE FROM [dbo].[a]; DROP TABLE x; --] WHERE Id = @id`,
		"' not doubled":        `SELECT OBJECT_ID(N'[dbo].[it's]')`,
		"pasted raw":           `DELETE FROM dbo.a; DROP TABLE x WHERE Id = @id`,
		"unbalanced":           `SELECT COUNT(*) FROM [dbo].[a] WHERE (Id = @id`,
		"typo in a keyword":    `SELECT Id FORM [dbo].[a]`,
		"column's case":        `SELECT id FROM [dbo].[a]`,
		"unterminated bracket": `SELECT Id FROM [dbo].[a`,
		"double quotes":        `SELECT Id FROM "dbo"."a"`,
	} {
		_, err := checkStatement(sql, "dbo", "a", cols)
		require.Error(t, err, name)
	}
}

// TestSchema pins what the seed's schema became, and ties the widths to the Go limits.
func TestSchema(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: "orders"})
	cols, err := tableColumns(q.setupTable)
	require.NoError(t, err)
	got := map[string]string{}
	var order []string
	for _, c := range cols {
		got[c.name] = c.def
		order = append(order, c.name)
		require.False(t, reservedKeywords()[strings.ToUpper(c.name)], "column %s is a reserved keyword", c.name)
	}
	// The seed's six columns first, in its order, then the five timeoutmill adds.
	require.Equal(t, []string{"Id", "Destination", "State", "Time", "Headers", "RetryCount", "AvailableAt", "Owner", "DedupKey",
		"ParkedReason", "ClaimedBy"}, order)
	require.Equal(t, "nvarchar ( 2000 ) NULL", got["ParkedReason"], "2000 bytes of UTF-8 are at most 2000 UTF-16 code units")
	require.Equal(t, "nvarchar ( 250 ) COLLATE Latin1_General_100_BIN2 NULL", got["ClaimedBy"])

	require.Equal(t, "nvarchar ( 250 ) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY", got["Id"])
	require.Equal(t, 250, persistence.MaxIDLength, "Id is nvarchar(250): a 250-byte UTF-8 id is at most 250 UTF-16 code units")
	require.Equal(t, "nvarchar ( 250 ) NOT NULL", got["Destination"])
	require.Equal(t, "nvarchar ( 250 ) COLLATE Latin1_General_100_BIN2 NOT NULL DEFAULT ( N'' )", got["Owner"])
	// A key as long as an id, NULL for none; a table an older version made gets the same column.
	require.Equal(t, "nvarchar ( 250 ) COLLATE Latin1_General_100_BIN2 NULL", got["DedupKey"])
	require.Contains(t, q.addKey, "ADD DedupKey nvarchar(250) COLLATE Latin1_General_100_BIN2 NULL;")
	require.Contains(t, q.keyIndex, "CREATE UNIQUE INDEX "+indexDedupKey+" ON [dbo].[orders.timeouts] (DedupKey) WHERE DedupKey IS NOT NULL;")
	require.Contains(t, q.installed, "'"+indexDedupKey+"'")
	require.Equal(t, 250, maxStringLength)
	require.Equal(t, "varbinary ( max )", got["State"])
	require.Equal(t, "varbinary ( max ) NOT NULL", got["Headers"])
	require.Equal(t, "INT NOT NULL DEFAULT ( 0 )", got["RetryCount"])
	// datetime would round to 1/300 s and deliver up to 3.33 ms early.
	require.Equal(t, "datetime2 ( 7 ) NOT NULL", got["Time"])
	require.Equal(t, "datetime2 ( 7 ) NOT NULL", got["AvailableAt"])

	// Index_Time as the seed has it, and one on each new column.
	for index, column := range map[string]string{indexTime: "Time", indexAvailableAt: "AvailableAt", indexOwner: "Owner"} {
		require.Contains(t, q.setupTable, "CREATE INDEX "+index+" ON [dbo].[orders.timeouts] ("+column+");")
		require.Contains(t, q.setupTable, "WHERE name = '"+index+"' AND object_id = OBJECT_ID(N'[dbo].[orders.timeouts]')")
		require.Contains(t, q.installed, "'"+index+"'")
	}
	require.Contains(t, q.claim, "WITH (INDEX("+indexAvailableAt+"), READPAST, UPDLOCK, ROWLOCK)")
}

// TestResultColumns: what each statement returns, which the fake driver's answers must match.
func TestResultColumns(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: "orders"})
	want := map[string][]string{
		"setupSchema":           nil,
		"setupTable":            nil,
		"installed":             {"COUNT(*)+CASEWHENCOL_LENGTH(N'[dbo].[orders.timeouts]','ParkedReason')ISNULLTHEN0ELSE1END"},
		"lockSetup":             nil,
		"store":                 {"@@ROWCOUNT"},
		"next":                  {"TODATETIMEOFFSET(MIN(AvailableAt),0)"},
		"claim":                 {"inserted.Id", "TODATETIMEOFFSET(inserted.Time,0)"},
		"peek":                  {"Destination", "TODATETIMEOFFSET(Time,0)", "Owner", "State", "Headers", "RetryCount", "COALESCE(DedupKey,N'')", "COALESCE(ParkedReason,N'')"},
		"delete":                {"@@ROWCOUNT"},
		"incrementFailureCount": {"@@ROWCOUNT"},
		"cancelByOwner":         {"@@ROWCOUNT"},
		"addKey":                nil,
		"keyIndex":              nil,
		"stats": {"COUNT(*)", "SUM(CASEWHENTime<=CAST(@nowASdatetime2(7))ANDParkedReasonISNULLTHEN1ELSE0END)",
			"SUM(CASEWHENAvailableAt<>TimeANDAvailableAt>CAST(@nowASdatetime2(7))ANDParkedReasonISNULLTHEN1ELSE0END)",
			"SUM(CASEWHENParkedReasonISNOTNULLTHEN1ELSE0END)", "TODATETIMEOFFSET(MIN(Time),0)", "TODATETIMEOFFSET(MAX(Time),0)"},
		"statsByDestination":  {"Destination", "COUNT(*)"},
		"now":                 {"TODATETIMEOFFSET(SYSUTCDATETIME(),0)"},
		"exists":              {"1"},
		"keyHolder":           {"Id", "TODATETIMEOFFSET(Time,0)", "TODATETIMEOFFSET(AvailableAt,0)"},
		"dropKey":             {"@@ROWCOUNT"},
		"schedule":            {"@@ROWCOUNT"},
		"reschedule":          {"@@ROWCOUNT"},
		"list":                {"Id", "Destination", "TODATETIMEOFFSET(Time,0)", "Owner", "Headers", "RetryCount", "COALESCE(DedupKey,N'')", "COALESCE(ParkedReason,N'')"},
		"listFiltered":        {"Id", "Destination", "TODATETIMEOFFSET(Time,0)", "Owner", "Headers", "RetryCount", "COALESCE(DedupKey,N'')", "COALESCE(ParkedReason,N'')"},
		"storeMany(2)":        {"inserted.Id"},
		"peekMany(2)":         {"Id", "Destination", "TODATETIMEOFFSET(Time,0)", "Owner", "State", "Headers", "RetryCount", "COALESCE(DedupKey,N'')", "COALESCE(ParkedReason,N'')"},
		"removeMany(2)":       {"deleted.Id"},
		"releaseMany(2)":      {"@@ROWCOUNT"},
		"addParked":           nil,
		"claimedByIndex":      nil,
		"park":                {"@@ROWCOUNT"},
		"releaseClaimsOf":     {"@@ROWCOUNT"},
		"unparkMany(2)":       {"@@ROWCOUNT"},
		"deleteParkedMany(2)": {"@@ROWCOUNT"},
		"holdInstance":        {"@result"},
		"releaseInstance":     nil,
	}
	for _, st := range statements(q) {
		got, err := resultColumns(st.sql)
		require.NoError(t, err, st.name)
		require.Equal(t, want[st.name], got, st.name)
	}
}

// TestClaimUpdatesThroughItsCTE: the CTE the claim updates selects every column the UPDATE sets
// and OUTPUT returns; otherwise SQL Server refuses the statement (error 207).
func TestClaimUpdatesThroughItsCTE(t *testing.T) {
	t.Parallel()
	toks, err := lex(queriesFor(t, Config{Endpoint: "orders"}).claim)
	require.NoError(t, err)
	var selected []string
	for i := 0; i < len(toks) && !isWord(toks[i], "FROM"); i++ {
		if i > 0 && toks[i].kind == tokWord && (toks[i-1].text == "," || toks[i-1].text == ")") && !isWord(toks[i], "FROM") {
			selected = append(selected, toks[i].text)
		}
	}
	require.Equal(t, []string{"Id", "Time", "AvailableAt", "ClaimedBy"}, selected)
	for i, tok := range toks {
		if isWord(tok, "SET") || tok.text == "inserted" {
			col := toks[i+1]
			if col.text == "." {
				col = toks[i+2]
			}
			require.Contains(t, selected, col.text)
		}
	}
}

// TestInsertListsMatch: the INSERT names as many columns as its SELECT gives values.
func TestInsertListsMatch(t *testing.T) {
	t.Parallel()
	q := queriesFor(t, Config{Endpoint: "orders"})
	head, rest, ok := strings.Cut(q.store, "\nSELECT ")
	require.True(t, ok)
	columns := head[strings.Index(head, "(")+1 : strings.LastIndex(head, ")")]
	values, _, ok := strings.Cut(rest, "\n")
	require.True(t, ok)
	require.Len(t, strings.Split(values, ","), len(strings.Split(columns, ",")))
	require.Equal(t, "Id, Destination, State, Time, Headers, RetryCount, AvailableAt, Owner", columns)
	require.Equal(t, "@id, @destination, @state, CAST(@due AS datetime2(7)), @headers, @failureCount, CAST(@due AS datetime2(7)), @owner", values,
		"a new timeout is claimable at its due time")
}
