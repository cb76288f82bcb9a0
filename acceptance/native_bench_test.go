package acceptance

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/timeoutmill/timeoutmill/internal/nativedelay"
	"github.com/timeoutmill/timeoutmill/persistence"
)

// nativeBenchEnv asks for the migration benchmark and says how many timeouts it migrates. It is
// not part of `make test`:
//
//	scripts/services.sh up rabbitmq postgres && source <(scripts/services.sh env)
//	TIMEOUTMILL_BENCH_MIGRATE=1000000 go test ./acceptance -run TestNativeMigrateBench -v -timeout 60m
const nativeBenchEnv = "TIMEOUTMILL_BENCH_MIGRATE"

// TestNativeMigrateBench measures `timeoutmill migrate --to rabbitmq-native`, the command as
// shipped, moving n timeouts from PostgreSQL to the local RabbitMQ. The timeouts are written
// straight into the store's table with one INSERT ... SELECT (storing a million one by one would
// take longer than migrating them), due from an hour ago to 23 days ahead, so they spread over
// the levels as real ones would.
func TestNativeMigrateBench(t *testing.T) {
	value := os.Getenv(nativeBenchEnv)
	if value == "" {
		t.Skipf("set %s=1000000 to measure migrating that many timeouts", nativeBenchEnv)
	}
	n, err := strconv.Atoi(value)
	require.NoError(t, err, nativeBenchEnv)
	ctx := context.Background()
	bin := nativeBinary(t)
	e := newNativeEnv(t)
	endpoint := e.prefix + ".orders"
	dsn, store := e.commandStore(t, endpoint)
	dest := e.queue(t, "bench")

	start := time.Now()
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO public.%q (id, destination, due, available_at, payload, metadata)
SELECT 'bench-' || g, $1, d, d, convert_to('payload of timeout ' || g, 'UTF8'), $2
FROM generate_series(1, $3::int) AS g, LATERAL (SELECT now() - interval '1 hour' + g * interval '2 seconds' AS d) AS due`, endpoint+".timeouts"),
		dest, persistence.EncodeMetadata(map[string]string{"_watermill_message_uuid": "bench", "trace": "benchmark"}), n)
	require.NoError(t, err)
	t.Logf("seeded %d timeouts in %s", n, time.Since(start).Round(time.Millisecond))

	args := []string{"--log-level", "error", "migrate", "--to", "rabbitmq-native", "--store", dsn, "--endpoint", endpoint,
		"--transport", e.url, "--delay-prefix", e.prefix}
	start = time.Now()
	out, err := exec.Command(bin, args...).CombinedOutput()
	elapsed := time.Since(start)
	require.NoError(t, err, "%s", out)
	t.Logf("timeoutmill migrate:\n%s", out)
	t.Logf("MIGRATED %d timeouts from PostgreSQL to RabbitMQ in %s: %.0f timeouts/s", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())

	sv, err := store.Survey(ctx, persistence.MinDue)
	require.NoError(t, err)
	require.Zero(t, sv.Count, "the store is empty")
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	waiting := 0
	for level := 0; level < nativedelay.Levels; level++ {
		q, err := ch.QueueDeclarePassive(e.topo.Queue(level), true, false, false, false, nil)
		require.NoError(t, err)
		waiting += q.Messages
	}
	q, err := ch.QueueDeclarePassive(dest, true, false, false, false, nil)
	require.NoError(t, err)
	t.Logf("%d wait in the levels, %d past due delivered at once", waiting, q.Messages)
	// Verify's probes (55 at most) can wait behind migrated messages too.
	require.GreaterOrEqual(t, waiting+q.Messages, n)
	require.LessOrEqual(t, waiting+q.Messages, n+2*nativedelay.Levels)
}
