package bench

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStatFieldsReadPastTheCommandName: a command name may hold spaces and parentheses; the
// fields are read after its last parenthesis.
func TestStatFieldsReadPastTheCommandName(t *testing.T) {
	t.Parallel()
	line := "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 30 7 3 20 0 1 0 100 1000 10"
	fields, ppid, err := statFields(line)
	require.NoError(t, err)
	require.Equal(t, 17, ppid)
	require.Equal(t, "S", fields[0])
	require.Equal(t, []string{"250", "30", "7", "3"}, fields[14-3:17-3+1], "utime, stime, cutime, cstime")
	_, _, err = statFields("4242 (short) S 1 2")
	require.Error(t, err)
	_, _, err = statFields("no name")
	require.Error(t, err)
}

// TestProcCPUCountsAChildThatEnded: a process's CPU includes its children's once they ended and
// were waited for, so that a tree's sum loses no PostgreSQL backend that exits.
func TestProcCPUCountsAChildThatEnded(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system: the scale-out's CPU report reads it")
	}
	before, err := procCPU(os.Getpid())
	require.NoError(t, err)
	// A child that spins for a while, then ends and is waited for.
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done`)
	require.NoError(t, cmd.Run())
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	after, err := procCPU(os.Getpid())
	require.NoError(t, err)
	// /proc counts whole ticks: the child's user and system times each lose up to one.
	require.GreaterOrEqual(t, after-before, child-2*clockTick, "the ended child's %s counts in its parent (%s before, %s after)", child, before, after)

	tree, err := treeCPU(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, tree, after)
}

// TestTreeCPUCountsARunningChild: the CPU of a process under the root that still runs counts.
func TestTreeCPUCountsARunningChild(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system: the scale-out's CPU report reads it")
	}
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 100000000 ]; do i=$((i+1)); done`)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var child time.Duration
	require.Eventually(t, func() bool {
		var err error
		child, err = procCPU(cmd.Process.Pid)
		return err == nil && child >= 5*clockTick
	}, 30*time.Second, 10*time.Millisecond, "the spinning child used no CPU")
	self, err := procCPU(os.Getpid())
	require.NoError(t, err)
	tree, err := treeCPU(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, tree, self+child)
}

// TestListenerFindsTheProcessOnAPort: the process listening on a URL's port is found, here this
// test's own; a port nobody listens on and a remote host are errors.
func TestListenerFindsTheProcessOnAPort(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp on this system: the scale-out's CPU report reads it")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	pid, err := listener("amqp://guest:guest@127.0.0.1:" + port + "/")
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), pid)
	pid, err = listener("host=localhost port=" + port + " user=x dbname=y")
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), pid)
	require.NoError(t, l.Close())

	_, err = listener("amqp://guest:guest@127.0.0.1:" + port + "/")
	require.ErrorContains(t, err, "nothing listens")
	_, err = listener("postgres://u@db.example.com:5432/x")
	require.ErrorContains(t, err, "not on this machine")
}

func TestURLHostPort(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]struct {
		host string
		port int
	}{
		"postgres://u:p@127.0.0.1:5442/timeoutmill?sslmode=disable":             {"127.0.0.1", 5442},
		"amqp://guest:guest@localhost:5682/,amqp://guest:guest@localhost:5683/": {"localhost", 5682},
		"host=127.0.0.1 port=5462 dbname=x":                                     {"127.0.0.1", 5462},
		"dbname=x":                                                              {"localhost", 5432},
	} {
		host, port, err := urlHostPort(in)
		require.NoError(t, err, in)
		require.Equal(t, want.host, host, in)
		require.Equal(t, want.port, port, in)
	}
	_, _, err := urlHostPort("host=x port=five")
	require.Error(t, err)
}

// TestMachineCPUIsBusyPartOfAll: the machine's busy time is part of its time, and both grow.
func TestMachineCPUIsBusyPartOfAll(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat on this system: the scale-out's CPU report reads it")
	}
	busy, all, switches, err := machineCPU()
	require.NoError(t, err)
	require.Positive(t, busy)
	require.Less(t, busy, all)
	require.Positive(t, switches)
}

// TestCPUReportIsPerThousandDelivered: each process's CPU between the samples is divided by the
// messages delivered; a server not found is named, not reported as zero.
func TestCPUReportIsPerThousandDelivered(t *testing.T) {
	t.Parallel()
	w := &cpuWatch{postgres: 1, missing: []string{"RabbitMQ: nothing listens on port 5682"}}
	from := cpuSample{instances: time.Second, postgres: 2 * time.Second, self: 0, busy: 10 * time.Second, all: 20 * time.Second, switches: 1000}
	to := cpuSample{instances: 4 * time.Second, postgres: 8 * time.Second, self: time.Second, busy: 25 * time.Second, all: 40 * time.Second, switches: 301000}
	line, figures := w.report(from, to, 100000)
	require.InDelta(t, 30, figures["cpu_instances_ms_per_k"], 1e-9)
	require.InDelta(t, 60, figures["cpu_postgres_ms_per_k"], 1e-9)
	require.InDelta(t, 10, figures["cpu_self_ms_per_k"], 1e-9)
	require.InDelta(t, 150, figures["cpu_machine_ms_per_k"], 1e-9)
	require.InDelta(t, 75, figures["machine_busy_pct"], 1e-9)
	require.NotContains(t, figures, "cpu_rabbitmq_ms_per_k")
	require.Contains(t, line, "instances 30 ms, PostgreSQL 60 ms, the bench's process (its consumer) 10 ms; the whole machine 150 ms, its cores 75 % busy, 3000 context switches")
	require.Contains(t, line, "not measured: RabbitMQ: nothing listens on port 5682")
}

// TestBatchesNoteReadsTheHistograms: the claims' and dispatch batches' mean sizes come from the
// histograms' sums and counts; a service without them is said to have none.
func TestBatchesNoteReadsTheHistograms(t *testing.T) {
	t.Parallel()
	figures := map[string]float64{}
	note := batchesNote([len(batchMetrics)]batchSizes{{count: 210, sum: 100000, empty: 10}, {count: 800, sum: 100000}}, figures)
	require.Contains(t, note, "210 claims, 476 ids each on average, 10 of them empty")
	require.Contains(t, note, "800 dispatch batches, 125.0 timeouts each on average")
	require.InDelta(t, 125, figures["dispatch_batch_mean"], 1e-9)
	require.InDelta(t, 10, figures["claims_empty"], 1e-9)

	figures = map[string]float64{}
	note = batchesNote([len(batchMetrics)]batchSizes{}, figures)
	require.Contains(t, note, "not measured")
	require.Empty(t, figures)
}

func TestPGNoteIsPerThousandDelivered(t *testing.T) {
	t.Parallel()
	figures := map[string]float64{}
	note := pgNote(pgActivity{commits: 100, claimScans: 5, claimReads: 50}, pgActivity{commits: 1100, claimScans: 405, claimReads: 100050}, 100000, figures)
	require.InDelta(t, 10, figures["pg_commits_per_k"], 1e-9)
	require.InDelta(t, 4, figures["pg_claim_scans_per_k"], 1e-9)
	require.InDelta(t, 1000, figures["pg_claim_reads_per_k"], 1e-9)
	require.Contains(t, note, "10.0 commits")
	require.Contains(t, pgNote(pgActivity{}, pgActivity{}, 0, figures), "nothing delivered")
}
