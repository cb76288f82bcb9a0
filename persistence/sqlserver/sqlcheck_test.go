package sqlserver

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/timeoutmill/timeoutmill/internal/sqlstore"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// What the statements may contain, for checks that a typo cannot hide: every word must be a
// keyword or function the store uses, or a name it created, spelled as created.

// keywords are compared case-insensitively, as SQL Server compares keywords and function names.
func keywords() map[string]bool {
	return wordSet(`
	ADD ALTER AND AS BEGIN BY CASE CAST COALESCE COLLATE COL_LENGTH COUNT CREATE DECLARE DEFAULT DELETE
	ELSE END EXEC EXISTS FROM GROUP HOLDLOCK IF IN INDEX INSERT INTO IS KEY MAX MIN NOT NULL OBJECT_ID
	ON OR ORDER OUTPUT PRIMARY READPAST ROWLOCK SCHEMA SCHEMA_ID SELECT SET SUM SYSUTCDATETIME TABLE THEN RAISERROR
	TODATETIMEOFFSET TOP UNIQUE UPDATE UPDLOCK VALUES WHEN WHERE WITH
	INT datetime2 datetimeoffset nvarchar varbinary
	Latin1_General_100_BIN2`)
}

// catalogNames are the system objects and columns the store reads, and the procedure it calls.
// They are compared exactly: on a server with a case-sensitive collation they must be.
func catalogNames() []string {
	return []string{"sys", "objects", "indexes", "object_id", "name", "type", "sp_getapplock", "sp_releaseapplock"}
}

// localNames are names the statements give themselves: the claim's CTE, OUTPUT's rows, and
// StoreMany's rows (fresh, with their Due) and the table it looks them up in (stored).
func localNames() []string {
	return []string{"claimable", "inserted", "deleted", "fresh", "Due", "stored"}
}

// reservedKeywords are SQL Server's reserved keywords, which a column may be named only if it is
// always bracketed. The store's columns are not, so none may be one.
func reservedKeywords() map[string]bool {
	return wordSet(`
	ADD ALL ALTER AND ANY AS ASC AUTHORIZATION BACKUP BEGIN BETWEEN BREAK BROWSE BULK BY CASCADE
	CASE CHECK CHECKPOINT CLOSE CLUSTERED COALESCE COLLATE COLUMN COMMIT COMPUTE CONSTRAINT
	CONTAINS CONTAINSTABLE CONTINUE CONVERT CREATE CROSS CURRENT CURRENT_DATE CURRENT_TIME
	CURRENT_TIMESTAMP CURRENT_USER CURSOR DATABASE DBCC DEALLOCATE DECLARE DEFAULT DELETE DENY DESC
	DISK DISTINCT DISTRIBUTED DOUBLE DROP DUMP ELSE END ERRLVL ESCAPE EXCEPT EXEC EXECUTE EXISTS
	EXIT EXTERNAL FETCH FILE FILLFACTOR FOR FOREIGN FREETEXT FREETEXTTABLE FROM FULL FUNCTION GOTO
	GRANT GROUP HAVING HOLDLOCK IDENTITY IDENTITY_INSERT IDENTITYCOL IF IN INDEX INNER INSERT
	INTERSECT INTO IS JOIN KEY KILL LEFT LIKE LINENO LOAD MERGE NATIONAL NOCHECK NONCLUSTERED NOT
	NULL NULLIF OF OFF OFFSETS ON OPEN OPENDATASOURCE OPENQUERY OPENROWSET OPENXML OPTION OR ORDER
	OUTER OVER PERCENT PIVOT PLAN PRECISION PRIMARY PRINT PROC PROCEDURE PUBLIC RAISERROR READ
	READTEXT RECONFIGURE REFERENCES REPLICATION RESTORE RESTRICT RETURN REVERT REVOKE RIGHT
	ROLLBACK ROWCOUNT ROWGUIDCOL RULE SAVE SCHEMA SECURITYAUDIT SELECT SEMANTICKEYPHRASETABLE
	SEMANTICSIMILARITYDETAILSTABLE SEMANTICSIMILARITYTABLE SESSION_USER SET SETUSER SHUTDOWN SOME
	STATISTICS SYSTEM_USER TABLE TABLESAMPLE TEXTSIZE THEN TO TOP TRAN TRANSACTION TRIGGER TRUNCATE
	TRY_CONVERT TSEQUAL UNION UNIQUE UNPIVOT UPDATE UPDATETEXT USE USER VALUES VARYING VIEW WAITFOR
	WHEN WHERE WHILE WITH WITHIN WRITETEXT`)
}

func wordSet(words string) map[string]bool {
	set := map[string]bool{}
	for _, w := range strings.Fields(words) {
		set[strings.ToUpper(w)] = true
	}
	return set
}

// namedSQL is one of the store's statements.
type namedSQL struct{ name, sql string }

// statements lists every statement of q, in a fixed order.
func statements(q queries) []namedSQL {
	return []namedSQL{
		{"setupSchema", q.setupSchema},
		{"setupTable", q.setupTable},
		{"installed", q.installed},
		{"lockSetup", q.lockSetup},
		{"store", q.store},
		{"next", q.next},
		{"now", q.now},
		{"claim", q.claim},
		{"peek", q.peek},
		{"delete", q.delete},
		{"incrementFailureCount", q.incrementFailureCount},
		{"cancelByOwner", q.cancelByOwner},
		{"addKey", q.addKey},
		{"keyIndex", q.keyIndex},
		{"stats", q.stats},
		{"statsByDestination", q.statsByDestination},
		{"exists", q.exists},
		{"keyHolder", q.keyHolder},
		{"dropKey", q.dropKey},
		{"schedule", q.schedule},
		{"reschedule", q.reschedule},
		{"addParked", q.addParked},
		{"claimedByIndex", q.claimedByIndex},
		{"park", q.park},
		{"releaseClaimsOf", q.releaseClaimsOf},
		{"holdInstance", holdInstance},
		{"releaseInstance", releaseInstance},
		// List's statement is made for the filters set; checked without any and with all.
		{"list", listStatement(q, persistence.ListOptions{})},
		{"listFiltered", listStatement(q, allFilters())},
		// The batch statements are made for each number of rows or ids; checked for two.
		{"storeMany(2)", q.storeMany(2)},
		{"peekMany(2)", q.peekMany(2)},
		{"removeMany(2)", q.removeMany(2)},
		{"releaseMany(2)", q.releaseMany(2)},
		{"unparkMany(2)", q.unparkMany(2)},
		{"deleteParkedMany(2)", q.deleteParkedMany(2)},
	}
}

// allFilters sets every filter of List.
func allFilters() persistence.ListOptions {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	return persistence.ListOptions{
		Limit: 7, Owner: "o", Destination: "orders", Key: "k", DueFrom: at, DueBefore: at.Add(time.Hour),
		After: persistence.Position{Due: at, ID: "a"},
	}
}

// listStatement is the statement List runs with opts.
func listStatement(q queries, opts persistence.ListOptions) string {
	s, err := sqlstore.New((&Store{q: q}).dialect())
	if err != nil {
		panic(err) // the statements compile: TestStatementsCompile
	}
	query, _ := sqlstore.ListStatement(s, opts)
	return query
}

// column is a column of the table, as the setup script creates it.
type column struct {
	name string
	// def is the rest of its definition, tokens joined by spaces: "nvarchar ( 250 ) NOT NULL".
	def string
}

// tableColumns reads the column definitions of the CREATE TABLE in the setup script.
func tableColumns(setup string) ([]column, error) {
	toks, err := lex(setup)
	if err != nil {
		return nil, err
	}
	start := -1
	for i := 0; i+1 < len(toks); i++ {
		if isWord(toks[i], "CREATE") && isWord(toks[i+1], "TABLE") {
			start = i + 2
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no CREATE TABLE")
	}
	for start < len(toks) && toks[start].text != "(" {
		start++
	}
	var (
		cols  []column
		cur   []token
		depth = 0
	)
	for _, tok := range toks[start:] {
		switch {
		case tok.kind == tokPunct && tok.text == "(":
			depth++
			if depth == 1 {
				continue
			}
		case tok.kind == tokPunct && tok.text == ")":
			depth--
			if depth == 0 {
				cols = append(cols, columnOf(cur))
				return cols, nil
			}
		case tok.kind == tokPunct && tok.text == "," && depth == 1:
			cols = append(cols, columnOf(cur))
			cur = nil
			continue
		}
		cur = append(cur, tok)
	}
	return nil, fmt.Errorf("CREATE TABLE's column list does not close")
}

func columnOf(toks []token) column {
	parts := make([]string, len(toks)-1)
	for i, t := range toks[1:] {
		parts[i] = t.String()
	}
	return column{name: toks[0].text, def: strings.Join(parts, " ")}
}

func isWord(t token, word string) bool {
	return t.kind == tokWord && strings.EqualFold(t.text, word)
}

// checkStatement checks one statement as far as tokens can tell: it lexes whole; its
// parentheses balance; it has no comment and no "quoted" name; every word is a keyword, or a
// name the store made or reads, spelled exactly; every [bracketed] name is the schema or the
// table, and appears as [schema].[table]; string literals that hold SQL (a name for OBJECT_ID, a
// statement for EXEC) pass the same checks. It returns the parameters the statement needs bound.
func checkStatement(sql, schema, table string, columns []string) ([]string, error) {
	toks, err := lex(sql)
	if err != nil {
		return nil, err
	}
	exact := slices.Concat(columns, catalogNames(), localNames(), []string{indexTime, indexAvailableAt, indexOwner, indexDedupKey, indexClaimedBy})
	keywords := keywords()
	var (
		depth    int
		params   []string
		declared []string
		inExec   bool
	)
	for i, tok := range toks {
		prev, next := token{}, token{}
		if i > 0 {
			prev = toks[i-1]
		}
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch tok.kind {
		case tokComment:
			return nil, fmt.Errorf("comment %q: the store writes none, so one is a name that broke out", tok.text)
		case tokQuoted:
			return nil, fmt.Errorf("\"quoted\" name %q: the store brackets names, and QUOTED_IDENTIFIER may be off", tok.text)
		case tokPunct:
			switch tok.text {
			case "(":
				depth++
			case ")":
				depth--
				if depth < 0 {
					return nil, fmt.Errorf(") without ( at token %d", i)
				}
			case ";":
				inExec = false
			}
		case tokWord:
			isFunction := next.text == "(" && keywords[strings.ToUpper(tok.text)] // OBJECT_ID( is not object_id
			switch {
			case slices.Contains(exact, tok.text):
			case isFunction,
				keywords[strings.ToUpper(tok.text)] && !slices.ContainsFunc(exact, func(n string) bool { return strings.EqualFold(n, tok.text) }):
				if isWord(tok, "EXEC") {
					inExec = true
				}
			default:
				return nil, fmt.Errorf("unknown word %q (a typo, or a name spelled otherwise than created)", tok.text)
			}
		case tokBracket:
			switch {
			case tok.text == schema && next.text == "." && i+2 < len(toks) && toks[i+2].kind == tokBracket && toks[i+2].text == table:
			case tok.text == table && prev.text == "." && i >= 2 && toks[i-2].kind == tokBracket && toks[i-2].text == schema:
			case tok.text == schema && isWord(prev, "SCHEMA"): // CREATE SCHEMA [schema]
			default:
				return nil, fmt.Errorf("[%s] is neither [schema].[table] nor CREATE SCHEMA [schema]", tok.text)
			}
		case tokString:
			if tok.text == schema || tok.text == table {
				break // a name as SCHEMA_ID takes it, not SQL
			}
			if inner, err := lex(tok.text); err == nil && slices.ContainsFunc(inner, func(t token) bool { return t.kind == tokBracket }) {
				if _, err := checkStatement(tok.text, schema, table, columns); err != nil {
					return nil, fmt.Errorf("in %s: %w", tok, err)
				}
			}
		case tokVariable:
			switch {
			case isWord(prev, "DECLARE"):
				declared = append(declared, tok.text)
			case slices.Contains(declared, tok.text):
			case inExec && next.text == "=" && (prev.kind == tokWord || prev.text == ","):
				// a named argument of the procedure EXEC calls
			default:
				if !slices.Contains(params, tok.text) {
					params = append(params, tok.text)
				}
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%d ( without )", depth)
	}
	slices.Sort(params)
	return params, nil
}

// shape is the statement with every bracketed name replaced by [·], every string literal that is
// one of names by '·', and SQL inside other string literals shaped in turn: two statements of one
// shape differ only in the names they hold.
func shape(sql string, names ...string) (string, error) {
	toks, err := lex(sql)
	if err != nil {
		return "", err
	}
	parts := make([]string, len(toks))
	for i, tok := range toks {
		switch tok.kind {
		case tokBracket:
			parts[i] = "[·]"
		case tokString:
			parts[i] = tok.String()
			if slices.Contains(names, tok.text) {
				parts[i] = "'·'"
			} else if inner, err := shape(tok.text, names...); err == nil {
				parts[i] = "'" + inner + "'"
			}
		default:
			parts[i] = tok.String()
		}
	}
	return strings.Join(parts, " "), nil
}

// resultColumns returns the expressions of the result set a statement returns: its OUTPUT list,
// or else the select list of its last SELECT. Statements that return no rows give nil.
func resultColumns(sql string) ([]string, error) {
	toks, err := lex(sql)
	if err != nil {
		return nil, err
	}
	start, output, depth := -1, -1, 0
	for i, tok := range toks {
		switch {
		case tok.text == "(":
			depth++
		case tok.text == ")":
			depth--
		case depth == 0 && isWord(tok, "SELECT"):
			start = i + 1
		case depth == 0 && isWord(tok, "OUTPUT"):
			output = i + 1
		}
	}
	if output >= 0 { // INSERT ... OUTPUT ... SELECT returns the OUTPUT list
		start = output
	}
	if start < 0 {
		return nil, nil
	}
	if isWord(toks[start], "TOP") { // TOP ( @limit )
		start += 4
	}
	var (
		cols []string
		cur  []string
	)
	depth = 0
	for _, tok := range toks[start:] {
		if depth == 0 && (tok.text == ";" || isWord(tok, "FROM") || isWord(tok, "WHERE") || isWord(tok, "SELECT")) {
			break
		}
		switch tok.text {
		case "(":
			depth++
		case ")":
			depth--
		}
		if depth == 0 && tok.text == "," {
			cols = append(cols, strings.Join(cur, ""))
			cur = nil
			continue
		}
		cur = append(cur, tok.String())
	}
	return append(cols, strings.Join(cur, "")), nil
}
