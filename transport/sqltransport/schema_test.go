package sqltransport

import (
	"strings"
	"testing"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

func TestTableNames(t *testing.T) {
	t.Parallel()
	pg := names{dialect: PostgreSQL, prefix: "watermill_"}
	require.Equal(t, `"watermill_orders.Timeouts"`, pg.quoted("orders.Timeouts"))
	withSchema := names{dialect: PostgreSQL, prefix: "watermill_", schema: `my "app"`}
	require.Equal(t, `"my ""app"""."watermill_orders"`, withSchema.quoted("orders"))
	my := names{dialect: MySQL, prefix: "q_"}
	require.Equal(t, "`q_orders.TimeoutsDispatcher`", my.quoted("orders.TimeoutsDispatcher"))

	// Too long for the database: cut, and told apart by a hash of the whole topic.
	long := strings.Repeat("e", 60)
	a, b := pg.table(long+".Timeouts"), pg.table(long+".TimeoutsDispatcher")
	require.Len(t, a, 63)
	require.Len(t, b, 63)
	require.NotEqual(t, a, b)
	require.Len(t, my.table(long+".Timeouts"), 64)
	require.Equal(t, a, pg.table(long+".Timeouts"), "stable")
}

func TestValidateTopic(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"orders", "orders.Timeouts", "a-b_c:d$e", "X1"} {
		require.NoError(t, validateTopic(ok), ok)
	}
	for _, bad := range []string{"", "a b", `a"b`, "a`b", "a;b", "ünï", "a/b"} {
		require.ErrorIs(t, validateTopic(bad), ErrInvalidTopic, bad)
	}
}

func TestInsertQuery(t *testing.T) {
	t.Parallel()
	m1 := message.NewMessage("id-1", []byte{0, 1, 0xff})
	m1.Metadata.Set("k", "ü")
	m2 := message.NewMessage("id-2", nil)
	q, err := queueSchema{names: names{dialect: PostgreSQL, prefix: "w_"}}.InsertQuery(wsql.InsertQueryParams{Topic: "t", Msgs: message.Messages{m1, m2}})
	require.NoError(t, err)
	require.Equal(t, `INSERT INTO "w_t" ("uuid", "payload", "metadata") VALUES ($1,$2,$3),($4,$5,$6)`, q.Query)
	require.Equal(t, []any{"id-1", []byte{0, 1, 0xff}, `{"k":"ü"}`, "id-2", []byte(nil), `{}`}, q.Args)

	q, err = queueSchema{names: names{dialect: MySQL, prefix: "w_"}}.InsertQuery(wsql.InsertQueryParams{Topic: "t", Msgs: message.Messages{m1}})
	require.NoError(t, err)
	require.Equal(t, "INSERT INTO `w_t` (`uuid`, `payload`, `metadata`) VALUES (?,?,?)", q.Query)
}

func TestSelectQueryRefusesConsumerGroups(t *testing.T) {
	t.Parallel()
	s := queueSchema{names: names{dialect: PostgreSQL, prefix: "w_"}, batchSize: 7}
	q, err := s.SelectQuery(wsql.SelectQueryParams{Topic: "t"})
	require.NoError(t, err)
	require.Equal(t, `SELECT "offset", "uuid", "payload", "metadata" FROM "w_t" WHERE "acked" = false ORDER BY "offset" LIMIT 7 FOR UPDATE SKIP LOCKED`, q.Query)
	_, err = s.SelectQuery(wsql.SelectQueryParams{Topic: "t", ConsumerGroup: "g"})
	require.ErrorContains(t, err, "no consumer groups")
}

// TestAckEndsOnlyAckedRows: only the offsets given, those of acked messages, are ended.
func TestAckEndsOnlyAckedRows(t *testing.T) {
	t.Parallel()
	pg := queueOffsets{names: names{dialect: PostgreSQL, prefix: "w_"}}
	q, args := pg.ackQuery("t", []int64{4, 5})
	require.Equal(t, `DELETE FROM "w_t" WHERE "offset" = ANY($1)`, q)
	require.Equal(t, []any{[]int64{4, 5}}, args)

	my := queueOffsets{names: names{dialect: MySQL, prefix: "w_"}}
	q, args = my.ackQuery("t", []int64{4, 5, 9, 12})
	require.Equal(t, "UPDATE `w_t` SET `acked` = TRUE WHERE `offset` IN (?,?,?,?)", q)
	require.Equal(t, []any{int64(4), int64(5), int64(9), int64(12)}, args)
}

func TestDecodeMetadata(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]message.Metadata{
		``:                                      {},
		`null`:                                  {},
		`{}`:                                    {},
		`{"a":"ü","b":""}`:                      {"a": "ü", "b": ""},
		`{"n":2,"t":true,"z":null,"o":{"x":1}}`: {"n": "2", "t": "true", "z": "", "o": `{"x":1}`},
	} {
		require.Equal(t, want, decodeMetadata([]byte(raw)), raw)
	}
	for _, bad := range []string{`[1]`, `"s"`, `{`, `not json`} {
		md := decodeMetadata([]byte(bad))
		require.Contains(t, md.Get(InvalidMetadataHeader), "not a JSON object", bad)
	}
}
