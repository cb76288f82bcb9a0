package bench

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Where a drain's CPU goes: the instances, the servers and this process, read from /proc before
// and after the drain. Counts per message, unlike rates, hardly change with the machine's load,
// so they tell what more instances cost where.

// clockTick is the unit of the CPU times in /proc (USER_HZ): 100 a second on every Linux the
// bench runs on.
const clockTick = 10 * time.Millisecond

// procCPU is the CPU time, user and system, of process pid, its children that ended and were
// waited for included (a PostgreSQL backend that exited counts in its postmaster's).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	fields, _, err := statFields(string(b))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	// utime, stime, cutime and cstime are the 14th to 17th fields; fields starts at the 3rd.
	var ticks int64
	for _, f := range fields[14-3 : 17-3+1] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// statFields splits a /proc/<pid>/stat line after the command's name, which may hold spaces and
// parentheses: the fields from the 3rd (state) on, and the parent's pid (the 4th).
func statFields(line string) (fields []string, ppid int, err error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return nil, 0, errors.New("no command name")
	}
	fields = strings.Fields(line[end+1:])
	if len(fields) < 17-3+1 {
		return nil, 0, fmt.Errorf("%d fields after the command name", len(fields))
	}
	ppid, err = strconv.Atoi(fields[1])
	return fields, ppid, err
}

// treeCPU is the CPU time of process root and of every process under it (see procCPU). A
// process that ends between the listing and its reading counts as nothing: its parent counts it
// once it has waited for it.
func treeCPU(root int) (time.Duration, error) {
	total, err := procCPU(root)
	if err != nil {
		return 0, err
	}
	children := map[int][]int{}
	all, err := processes()
	if err != nil {
		return 0, err
	}
	for _, pid := range all {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			continue // ended meanwhile
		}
		if _, ppid, err := statFields(string(b)); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	for queue := children[root]; len(queue) > 0; queue = queue[1:] {
		if d, err := procCPU(queue[0]); err == nil {
			total += d
		}
		queue = append(queue, children[queue[0]]...)
	}
	return total, nil
}

// processes lists the ids of the processes running on this machine.
func processes() ([]int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, d := range dirs {
		if pid, err := strconv.Atoi(d.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// listener returns the pid of the process on this machine that listens on the TCP port of
// rawURL (a URL or a PostgreSQL key=value DSN with port=), or an error when the host is not a
// loopback address or no such process is found.
func listener(rawURL string) (int, error) {
	host, port, err := urlHostPort(rawURL)
	if err != nil {
		return 0, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, fmt.Errorf("%s is not on this machine", host)
	}
	var inodes []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		found, err := listeningInodes(table, port)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
		inodes = append(inodes, found...)
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on port %d", port)
	}
	want := map[string]bool{}
	for _, ino := range inodes {
		want["socket:["+ino+"]"] = true
	}
	all, err := processes()
	if err != nil {
		return 0, err
	}
	for _, pid := range all {
		dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && want[link] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process found holding the socket listening on port %d", port)
}

// urlHostPort reads the host and port of a URL, or of a key=value DSN.
func urlHostPort(raw string) (string, int, error) {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		// A list of nodes (a cluster) is measured by its first.
		h, p, err := net.SplitHostPort(strings.Split(u.Host, ",")[0])
		if err != nil {
			return "", 0, fmt.Errorf("%s: %w", u.Redacted(), err)
		}
		n, err := strconv.Atoi(p)
		return h, n, err
	}
	host, port := "localhost", 5432
	for _, kv := range strings.Fields(raw) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "host":
			host = v
		case "port":
			n, err := strconv.Atoi(v)
			if err != nil {
				return "", 0, fmt.Errorf("port %q: %w", v, err)
			}
			port = n
		}
	}
	return host, port, nil
}

// listeningInodes returns the socket inodes of the lines of a /proc/net/tcp table that listen on
// port.
func listeningInodes(table string, port int) ([]string, error) {
	f, err := os.Open(table)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	suffix := fmt.Sprintf(":%04X", port)
	var inodes []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st ... inode (the 10th)
		if len(fields) < 10 || fields[3] != "0A" || !strings.HasSuffix(fields[1], suffix) {
			continue
		}
		inodes = append(inodes, fields[9])
	}
	return inodes, sc.Err()
}

// machineCPU reads the machine's CPU time from /proc/stat: all of it, and the busy part (neither
// idle nor waiting for I/O), summed over its cores; and its context switches so far.
func machineCPU() (busy, all time.Duration, switches int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	lines := strings.Split(string(b), "\n")
	fields := strings.Fields(lines[0])
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0, 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", lines[0])
	}
	var ticks [10]int64
	for i, f := range fields[1:min(len(fields), 11)] {
		if ticks[i], err = strconv.ParseInt(f, 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	// user nice system idle iowait irq softirq steal guest guest_nice; guest time is in user.
	var total int64
	for _, t := range ticks[:8] {
		total += t
	}
	idle := ticks[3] + ticks[4]
	for _, line := range lines {
		if v, ok := strings.CutPrefix(line, "ctxt "); ok {
			if switches, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
				return 0, 0, 0, fmt.Errorf("/proc/stat: ctxt: %w", err)
			}
		}
	}
	return time.Duration(total-idle) * clockTick, time.Duration(total) * clockTick, switches, nil
}

// cpuSample is what the drain's CPU report reads at each end of the drain.
type cpuSample struct {
	instances, postgres, rabbitmq, self time.Duration
	busy, all                           time.Duration
	switches                            int64
}

// cpuWatch reads the CPU of a scale-out drain's processes. A server it cannot find on this
// machine is left out of the report, with the reason.
type cpuWatch struct {
	postgres, rabbitmq int // pids; 0 when not found
	missing            []string
}

func newCPUWatch(env Env) *cpuWatch {
	w := &cpuWatch{}
	var err error
	if w.postgres, err = listener(env.PostgresDSN); err != nil {
		w.missing = append(w.missing, "PostgreSQL: "+err.Error())
	}
	if w.rabbitmq, err = listener(env.AMQPURL); err != nil {
		w.missing = append(w.missing, "RabbitMQ: "+err.Error())
	}
	return w
}

// sample reads the CPU used so far by the instances, the servers, this process and the machine.
// An instance that ended is read from its exit.
func (w *cpuWatch) sample(instances []*instance) cpuSample {
	var s cpuSample
	for _, in := range instances {
		if d, err := procCPU(in.cmd.Process.Pid); err == nil {
			s.instances += d
		}
	}
	if w.postgres != 0 {
		s.postgres, _ = treeCPU(w.postgres)
	}
	if w.rabbitmq != 0 {
		s.rabbitmq, _ = treeCPU(w.rabbitmq)
	}
	s.self, _ = procCPU(os.Getpid())
	s.busy, s.all, s.switches, _ = machineCPU()
	return s
}

// report describes the CPU used between two samples, per 1,000 messages delivered.
func (w *cpuWatch) report(from, to cpuSample, delivered int) (string, map[string]float64) {
	per := func(d time.Duration) float64 {
		if delivered <= 0 {
			return 0
		}
		return float64(d.Microseconds()) / 1000 * 1000 / float64(delivered)
	}
	figures := map[string]float64{
		"cpu_instances_ms_per_k": per(to.instances - from.instances),
		"cpu_self_ms_per_k":      per(to.self - from.self),
	}
	parts := []string{fmt.Sprintf("instances %.0f ms", figures["cpu_instances_ms_per_k"])}
	if w.postgres != 0 {
		figures["cpu_postgres_ms_per_k"] = per(to.postgres - from.postgres)
		parts = append(parts, fmt.Sprintf("PostgreSQL %.0f ms", figures["cpu_postgres_ms_per_k"]))
	}
	if w.rabbitmq != 0 {
		figures["cpu_rabbitmq_ms_per_k"] = per(to.rabbitmq - from.rabbitmq)
		parts = append(parts, fmt.Sprintf("RabbitMQ %.0f ms", figures["cpu_rabbitmq_ms_per_k"]))
	}
	parts = append(parts, fmt.Sprintf("the bench's process (its consumer) %.0f ms", figures["cpu_self_ms_per_k"]))
	figures["cpu_machine_ms_per_k"] = per(to.busy - from.busy)
	line := fmt.Sprintf("CPU from just before the due time to the last arrival, per 1,000 delivered: %s; the whole machine %.0f ms",
		strings.Join(parts, ", "), figures["cpu_machine_ms_per_k"])
	if all := to.all - from.all; all > 0 {
		figures["machine_busy_pct"] = 100 * float64(to.busy-from.busy) / float64(all)
		line += fmt.Sprintf(", its cores %.0f %% busy", figures["machine_busy_pct"])
	}
	if delivered > 0 {
		figures["context_switches_per_k"] = float64(to.switches-from.switches) * 1000 / float64(delivered)
		line += fmt.Sprintf(", %.0f context switches", figures["context_switches_per_k"])
	}
	if len(w.missing) > 0 {
		line += " (not measured: " + strings.Join(w.missing, "; ") + ")"
	}
	return line, figures
}

// pgActivity is what PostgreSQL counted for the scale-out table and its database.
type pgActivity struct {
	commits, claimScans, claimReads int64
}

// readPGActivity reads the database's commits and the scans and entries read of table's
// available_at index: what claims and next-due reads touched. PostgreSQL publishes a backend's
// counts when its transaction ends, at most once a second, and when it exits: read after the
// instances stopped, they are complete.
func readPGActivity(ctx context.Context, db *sql.DB, table string) (pgActivity, error) {
	var a pgActivity
	err := db.QueryRowContext(ctx, `SELECT
	(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
	(SELECT COALESCE(sum(idx_scan), 0)::bigint FROM pg_stat_user_indexes WHERE relid = to_regclass($1) AND indexrelname LIKE '%available_at%'),
	(SELECT COALESCE(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes WHERE relid = to_regclass($1) AND indexrelname LIKE '%available_at%')`,
		table).Scan(&a.commits, &a.claimScans, &a.claimReads)
	return a, err
}

// cpuLead is how long before the backlog's due time the drain's CPU is first read: before the
// pollers claim it ahead.
const cpuLead = 200 * time.Millisecond

// batchMetrics are the service's histograms of how many ids each claim took and how many due
// timeouts each dispatch batch forwarded.
var batchMetrics = [...]string{"timeoutmill_claim_batch_size", "timeoutmill_dispatch_batch_size"}

// batchSizes sums one batch-size histogram over instances: its observations, their sum, and the
// empty ones.
type batchSizes struct{ count, sum, empty float64 }

// addBatches adds the instance's histogram name to b.
func (in *instance) addBatches(b batchSizes, name string) (batchSizes, error) {
	for _, x := range []struct {
		dst          *float64
		series, with string
	}{{&b.count, name + "_count", ""}, {&b.sum, name + "_sum", ""}, {&b.empty, name + "_bucket", `le="0"`}} {
		v, err := in.metric(x.series, x.with)
		if err != nil {
			return b, err
		}
		*x.dst += v
	}
	return b, nil
}

func (b batchSizes) mean() float64 {
	if b.count == 0 {
		return 0
	}
	return b.sum / b.count
}

// batchesNote describes the claims and the dispatch batches of all instances, and adds their
// figures.
func batchesNote(b [len(batchMetrics)]batchSizes, figures map[string]float64) string {
	claims, dispatches := b[0], b[1]
	if claims.count == 0 && dispatches.count == 0 {
		return "batch sizes not measured: this timeoutmill exports neither " + strings.Join(batchMetrics[:], " nor ")
	}
	figures["claims"], figures["claims_empty"], figures["claim_mean"] = claims.count, claims.empty, claims.mean()
	figures["dispatch_batches"], figures["dispatch_batch_mean"] = dispatches.count, dispatches.mean()
	return fmt.Sprintf("all instances: %s claims, %.0f ids each on average, %s of them empty (%s); %s dispatch batches, %.1f timeouts each on average (%s)",
		count(int(claims.count)), claims.mean(), count(int(claims.empty)), batchMetrics[0],
		count(int(dispatches.count)), dispatches.mean(), batchMetrics[1])
}

// pgNote describes what PostgreSQL counted between two reads, per 1,000 messages delivered, and
// adds the figures.
func pgNote(from, to pgActivity, delivered int, figures map[string]float64) string {
	if delivered <= 0 {
		return "PostgreSQL's counts: nothing delivered"
	}
	per := func(n int64) float64 { return float64(n) * 1000 / float64(delivered) }
	figures["pg_commits_per_k"] = per(to.commits - from.commits)
	figures["pg_claim_scans_per_k"] = per(to.claimScans - from.claimScans)
	figures["pg_claim_reads_per_k"] = per(to.claimReads - from.claimReads)
	return fmt.Sprintf("PostgreSQL per 1,000 delivered, to the instances' stop: %.1f commits in the database, %.1f scans of the available_at index (claims and next-due reads) reading %.0f entries",
		figures["pg_commits_per_k"], figures["pg_claim_scans_per_k"], figures["pg_claim_reads_per_k"])
}
