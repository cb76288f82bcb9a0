// Command timeoutmill runs the timeout manager of an endpoint as a service beside systems in any
// language, and administers its store:
//
//	timeoutmill run    --endpoint orders --transport amqp://... --store postgres://...
//	timeoutmill setup  --endpoint orders --transport amqp://... --store postgres://...
//	timeoutmill stats  --endpoint orders --store postgres://... [--json]
//	timeoutmill list   --endpoint orders --store postgres://... [--owner KEY] [--json]
//	timeoutmill cancel --endpoint orders --store postgres://... ID... | --owner KEY
//	timeoutmill reschedule --endpoint orders --store postgres://... ID --at TIME | --in DURATION
//	timeoutmill --version
//
// stats, list and cancel create nothing: on an endpoint whose table (or SQLite file) does not
// exist they say so and exit 1.
//
// Every flag can also be given as an environment variable: --poll-interval as
// TIMEOUTMILL_POLL_INTERVAL, and so on. `timeoutmill --help` describes them all.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/timeoutmill/timeoutmill/internal/connect"
)

// cli is the command line. Flags shared by commands are embedded structs.
type cli struct {
	LogLevel  string           `help:"Log level: debug, info, warn or error." enum:"debug,info,warn,error" default:"info"`
	LogFormat string           `help:"Log format on stderr: text (key=value pairs) or json (one JSON object a line, for log pipelines)." enum:"text,json" default:"text"`
	Version   kong.VersionFlag `help:"Print the version (with the commit it was built from, when known) and exit."`

	Run    runCmd    `cmd:"" help:"Run the store satellite, poller and dispatch satellite of an endpoint until SIGINT/SIGTERM or a critical error."`
	Setup  setupCmd  `cmd:"" help:"Create the store's table and declare the endpoint's queues (idempotent)."`
	Stats  statsCmd  `cmd:"" help:"Print how many timeouts are pending, the next due and the most overdue."`
	List   listCmd   `cmd:"" help:"List pending timeouts, earliest due first."`
	Cancel cancelCmd `cmd:"" help:"Cancel pending timeouts by id or by owner."`

	Reschedule rescheduleCmd `cmd:"" help:"Move a pending timeout's due time, keeping its id and message (--at or --in)."`
	Parked     parkedCmd     `cmd:"" help:"List, replay or delete the parked timeouts: those whose forward and error-queue copy were both refused."`

	Native  nativeCmd  `cmd:"" help:"Set up and check RabbitMQ's native delay infrastructure (28 delay levels)."`
	Migrate migrateCmd `cmd:"" help:"Move stored timeouts to RabbitMQ's native delay, while the timeout manager keeps running."`
}

// env is what every command runs with: output streams and the process's lifetime.
type env struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	level  string // --log-level
	format string // --log-format
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args and runs the command they name; it returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c cli
	exit := -1
	parser, err := newParser(&c, stdout, stderr, func(code int) { exit = code })
	if err != nil {
		fmt.Fprintln(stderr, "timeoutmill:", err)
		return 2
	}
	kctx, err := parser.Parse(args)
	if exit >= 0 { // --help, --version
		return exit
	}
	if err != nil {
		fmt.Fprintln(stderr, "timeoutmill:", err)
		return 2
	}
	if err := kctx.Run(&env{ctx: ctx, stdout: stdout, stderr: stderr, level: c.LogLevel, format: c.LogFormat}); err != nil {
		if c.LogFormat == "json" { // the last line too is one a log pipeline can read
			slog.New(slog.NewJSONHandler(stderr, nil)).Error("timeoutmill: "+err.Error(), "exit_code", 1)
			return 1
		}
		fmt.Fprintln(stderr, "timeoutmill:", err)
		return 1
	}
	return 0
}

// newParser returns the parser of the command line into c; exit is called instead of os.Exit.
func newParser(c *cli, stdout, stderr io.Writer, exit func(code int)) (*kong.Kong, error) {
	return kong.New(c,
		kong.Name("timeoutmill"),
		kong.Description("Durable delayed delivery for Watermill Pub/Subs: the NServiceBus timeout manager as a service."),
		kong.DefaultEnvars("TIMEOUTMILL"),
		kong.UsageOnError(),
		kong.Writers(stdout, stderr),
		kong.Exit(exit),
		kong.Vars{"store_schemes": connect.StoreSchemes, "transport_schemes": connect.TransportSchemes, "version": buildVersion()},
	)
}
