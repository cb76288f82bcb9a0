package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// services starts the servers the benchmark needs with the project's scripts/services.sh, as a
// set of their own (state dir, ports, RabbitMQ node name) beside the test servers, so that a test
// run stopping its servers cannot stop the benchmark's, and the benchmark's load does not slow
// the tests' servers.
type services struct {
	script string
	env    []string
	log    io.Writer
	// started lists the servers this run started, which stop stops.
	started []string
	// vars is the env file of the servers, once up has run.
	vars map[string]string
}

// benchServices is the environment of the benchmark's set of servers.
func benchServices() []string {
	return []string{
		"TIMEOUTMILL_SERVICES_DIR=/tmp/timeoutmill-bench",
		"TIMEOUTMILL_RABBITMQ_PORT=5702",
		"TIMEOUTMILL_POSTGRES_PORT=5462",
		"TIMEOUTMILL_RABBITMQ_NODENAME=timeoutbench@localhost",
		"TIMEOUTMILL_REDIS_PORT=6399",
		"TIMEOUTMILL_NATS_PORT=4242",
	}
}

// serviceNames are the servers the benchmark needs (not MariaDB).
func serviceNames() []string { return []string{"rabbitmq", "postgres", "redis", "nats"} }

func newServices(script string, log io.Writer) *services {
	env := os.Environ()
	for _, kv := range benchServices() {
		key, _, _ := strings.Cut(kv, "=")
		if _, set := os.LookupEnv(key); !set { // the caller's own set wins
			env = append(env, kv)
		}
	}
	return &services{script: script, env: env, log: log}
}

func (s *services) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, s.script, args...)
	cmd.Env = s.env
	cmd.Stderr = s.log
	return cmd
}

// up starts the servers that are not running and returns where they are.
func (s *services) up(ctx context.Context) (amqpURL, postgresDSN string, err error) {
	// status exits 1 when any server (MariaDB too) is down: read its lines instead.
	var status bytes.Buffer
	st := s.command(ctx, "status")
	st.Stdout = &status
	st.Stderr = &status
	_ = st.Run()
	running := map[string]bool{}
	for _, line := range strings.Split(status.String(), "\n") {
		name, state, ok := strings.Cut(line, ":")
		if ok && strings.HasPrefix(strings.TrimSpace(state), "up") {
			running[strings.TrimSpace(name)] = true
		}
	}
	up := s.command(ctx, append([]string{"up"}, serviceNames()...)...)
	up.Stdout = s.log
	if err := up.Run(); err != nil {
		return "", "", fmt.Errorf("%s up %s: %w", s.script, strings.Join(serviceNames(), " "), err)
	}
	for _, name := range serviceNames() {
		if !running[name] {
			s.started = append(s.started, name)
		}
	}
	var envFile bytes.Buffer
	e := s.command(ctx, "env")
	e.Stdout = &envFile
	if err := e.Run(); err != nil {
		return "", "", fmt.Errorf("%s env: %w", s.script, err)
	}
	vars := parseEnv(envFile.String())
	s.vars = vars
	return vars["TIMEOUTMILL_TEST_AMQP_URL"], vars["TIMEOUTMILL_TEST_POSTGRES_DSN"], nil
}

// streams are where the stream brokers up started are.
func (s *services) streams() (redisURL, natsURL string) {
	return s.vars["TIMEOUTMILL_TEST_REDIS_URL"], s.vars["TIMEOUTMILL_TEST_NATS_URL"]
}

// stop stops the servers up started.
func (s *services) stop(ctx context.Context) error {
	if len(s.started) == 0 {
		return nil
	}
	down := s.command(ctx, append([]string{"down"}, s.started...)...)
	down.Stdout = s.log
	if err := down.Run(); err != nil {
		return fmt.Errorf("%s down: %w", s.script, err)
	}
	return nil
}

// parseEnv reads the `export KEY=VALUE` lines services.sh env prints (values single-quoted or
// bare).
func parseEnv(text string) map[string]string {
	vars := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if !ok {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if len(value) >= 2 && value[0] == '\'' && value[len(value)-1] == '\'' {
			value = value[1 : len(value)-1]
		}
		vars[key] = value
	}
	return vars
}
