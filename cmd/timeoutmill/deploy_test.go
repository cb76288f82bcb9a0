package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The files under deploy/ and docs/deployment.md are copied by users as they are: these tests
// read them as Kubernetes, systemd and a shell would, and parse every command line and
// environment they give with the command's own parser.

const (
	manifestPath = "../../deploy/kubernetes/timeoutmill.yaml"
	unitPath     = "../../deploy/systemd/timeoutmill@.service"
	envFilePath  = "../../deploy/systemd/orders-1.env"
	deployDoc    = "../../docs/deployment.md"
)

// flagEnvs maps each environment variable the command line reads to its flag's name.
func flagEnvs(t *testing.T) map[string]string {
	t.Helper()
	var c cli
	parser, err := newParser(&c, io.Discard, io.Discard, func(int) {})
	require.NoError(t, err)
	envs := map[string]string{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			for _, env := range f.Tag.Envs {
				envs[env] = f.Name
			}
		}
		for _, child := range n.Children {
			walk(child)
		}
	}
	walk(parser.Model.Node)
	require.Contains(t, envs, "TIMEOUTMILL_METRICS_ADDR")
	require.Contains(t, envs, "TIMEOUTMILL_LOG_FORMAT")
	return envs
}

// parseDeployed parses args as the command line with exactly env as the TIMEOUTMILL_ environment
// (the test's own is hidden), and returns the parsed command line; it fails t on an unknown flag,
// a bad value or a missing required flag. It sets the environment: not for parallel tests.
func parseDeployed(t *testing.T, env map[string]string, args []string) cli {
	t.Helper()
	for name := range flagEnvs(t) {
		t.Setenv(name, "")
		require.NoError(t, os.Unsetenv(name))
	}
	for name, value := range env {
		t.Setenv(name, value)
	}
	var c cli
	parser, err := newParser(&c, io.Discard, io.Discard, func(int) { t.Fatalf("the command line %q exits", args) })
	require.NoError(t, err)
	kctx, err := parser.Parse(args)
	require.NoError(t, err, "the command line %q with %v", args, env)
	require.Equal(t, "run", kctx.Command())
	return c
}

// requireFlagEnvs fails t for a TIMEOUTMILL_ variable that no flag reads (a typo is ignored
// silently at run time).
func requireFlagEnvs(t *testing.T, where string, names []string) {
	t.Helper()
	envs := flagEnvs(t)
	for _, name := range names {
		_, ok := envs[name]
		require.True(t, ok, "%s names %s, which no flag reads", where, name)
	}
}

// listensOn fails t unless addr (a --http or --metrics-addr value) listens on port on an address
// other hosts reach.
func listensOn(t *testing.T, what, addr string, port int) {
	t.Helper()
	if what == "--http" {
		var err error
		addr, err = dashboardAddr(addr)
		require.NoError(t, err)
	}
	host, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, "%s %s", what, addr)
	require.Equal(t, strconv.Itoa(port), p, "%s %s serves the port probed or published", what, addr)
	ip := net.ParseIP(host)
	require.False(t, ip != nil && ip.IsLoopback(), "%s %s binds loopback, which a probe or a published port cannot reach", what, addr)
}

// k8sObject is what the test reads of a Kubernetes object.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Selector       map[string]any `yaml:"selector"`
		ServiceName    string         `yaml:"serviceName"`
		MaxUnavailable int            `yaml:"maxUnavailable"`
		Ports          []struct {
			Name       string `yaml:"name"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				Containers                    []struct {
					Args []string `yaml:"args"`
					Env  []struct {
						Name      string `yaml:"name"`
						Value     string `yaml:"value"`
						ValueFrom struct {
							FieldRef *struct {
								FieldPath string `yaml:"fieldPath"`
							} `yaml:"fieldRef"`
							SecretKeyRef *struct {
								Key string `yaml:"key"`
							} `yaml:"secretKeyRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					LivenessProbe  *httpProbe `yaml:"livenessProbe"`
					ReadinessProbe *httpProbe `yaml:"readinessProbe"`
					Resources      struct {
						Requests map[string]string `yaml:"requests"`
						Limits   map[string]string `yaml:"limits"`
					} `yaml:"resources"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type httpProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// matchLabels are the labels a selector of kind selects.
func matchLabels(t *testing.T, o k8sObject) map[string]any {
	t.Helper()
	if o.Kind == "Service" {
		return o.Spec.Selector
	}
	m, ok := o.Spec.Selector["matchLabels"].(map[string]any)
	require.True(t, ok, "%s %s selects by matchLabels", o.Kind, o.Metadata.Name)
	return m
}

// TestKubernetesManifest: the StatefulSet runs `timeoutmill run` as its pod's name, its probes
// ask /healthz and /readyz on the port the flags serve them on, on an address the kubelet
// reaches, its grace period outlasts --close-timeout, it has resources, and the Service and the
// PodDisruptionBudget select its pods.
func TestKubernetesManifest(t *testing.T) {
	raw, err := os.ReadFile(manifestPath)
	require.NoError(t, err)
	objects := map[string]k8sObject{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		objects[o.Kind] = o
	}
	require.Len(t, objects, 3)
	sts, svc, pdb := objects["StatefulSet"], objects["Service"], objects["PodDisruptionBudget"]
	require.Equal(t, svc.Metadata.Name, sts.Spec.ServiceName)
	labels := sts.Spec.Template.Metadata.Labels
	for _, o := range []k8sObject{sts, svc, pdb} {
		selected := matchLabels(t, o)
		require.NotEmpty(t, selected)
		for k, v := range selected {
			require.Equal(t, labels[k], v, "%s selects the pods by %s", o.Kind, k)
		}
	}
	require.Positive(t, pdb.Spec.MaxUnavailable)

	pod := sts.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	env := map[string]string{}
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
		switch {
		case e.ValueFrom.FieldRef != nil:
			require.Equal(t, "TIMEOUTMILL_INSTANCE", e.Name)
			require.Equal(t, "metadata.name", e.ValueFrom.FieldRef.FieldPath, "the instance is the pod's name")
			env[e.Name] = "orders-timeoutmill-0"
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = map[string]string{"store": "postgres://app:PASSWORD@postgres:5432/app",
				"transport": "amqp://app:PASSWORD@rabbitmq:5672/"}[e.ValueFrom.SecretKeyRef.Key]
			require.NotEmpty(t, env[e.Name], "a secret key the test knows")
		default:
			env[e.Name] = e.Value
		}
	}
	requireFlagEnvs(t, manifestPath, names)
	parsed := parseDeployed(t, env, c.Args)
	run := parsed.Run
	require.Equal(t, "orders-timeoutmill-0", run.Instance)
	require.Equal(t, "json", parsed.LogFormat)

	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for path, probe := range map[string]*httpProbe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		require.NotNil(t, probe, "a probe of %s", path)
		require.Equal(t, path, probe.HTTPGet.Path)
		port, ok := ports[probe.HTTPGet.Port]
		require.True(t, ok, "the probe's port %q is a container port", probe.HTTPGet.Port)
		switch {
		case run.MetricsAddr != "" && strings.HasSuffix(run.MetricsAddr, ":"+strconv.Itoa(port)):
			listensOn(t, "--metrics-addr", run.MetricsAddr, port)
		default:
			listensOn(t, "--http", run.HTTP, port)
		}
	}
	for _, p := range svc.Spec.Ports {
		require.Contains(t, ports, p.TargetPort, "the Service's port %s targets a container port", p.Name)
	}
	require.Greater(t, time.Duration(pod.TerminationGracePeriodSeconds)*time.Second, run.CloseTimeout,
		"the grace period outlasts --close-timeout")
	require.NotEmpty(t, c.Resources.Requests["cpu"])
	require.NotEmpty(t, c.Resources.Requests["memory"])
	require.NotEmpty(t, c.Resources.Limits["memory"])
}

// readEnvFile reads an environment file as systemd and podman/docker --env-file do: NAME=VALUE
// lines, # comments.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s: %q", path, line)
		require.NotContains(t, value, `"`, "no quotes: docker's --env-file would keep them")
		env[name] = value
	}
	require.NoError(t, sc.Err())
	var names []string
	for name := range env {
		names = append(names, name)
	}
	requireFlagEnvs(t, path, names)
	return env
}

// TestSystemdUnit: the template unit's command line, with %i and the environment file of an
// instance, is one the command parses, naming the instance %i; its stop waits longer than
// --close-timeout; systemd-analyze verify finds nothing to say about it, where it is installed.
func TestSystemdUnit(t *testing.T) {
	raw, err := os.ReadFile(unitPath)
	require.NoError(t, err)
	keys := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = strings.ReplaceAll(v, "%i", "orders-1")
		}
	}
	require.Equal(t, "/etc/timeoutmill/orders-1.env", keys["EnvironmentFile"])
	require.Equal(t, "orders-1.env", filepath.Base(envFilePath), "deploy/ has the instance's environment file")
	env := readEnvFile(t, envFilePath)
	execStart := strings.Fields(keys["ExecStart"])
	require.Equal(t, "/usr/local/bin/timeoutmill", execStart[0])
	parsed := parseDeployed(t, env, execStart[1:])
	require.Equal(t, "orders-1", parsed.Run.Instance)
	require.Equal(t, "orders", parsed.Run.Endpoint)
	stop, err := time.ParseDuration(keys["TimeoutStopSec"])
	require.NoError(t, err)
	require.Greater(t, stop, parsed.Run.CloseTimeout, "TimeoutStopSec outlasts --close-timeout")

	verifyUnit(t, raw)
}

// verifyUnit runs systemd-analyze verify on an instance of the unit, its ExecStart an executable
// that exists (this test's binary), and fails t if it reports anything.
func verifyUnit(t *testing.T, unit []byte) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: the unit's syntax is not verified")
		return
	}
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "timeoutmill@orders-1.service")
	require.NoError(t, os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/timeoutmill"), []byte(self)), 0o644))
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify")
}

// TestDeploymentDoc: docs/deployment.md shows the files of deploy/ as they are, every
// TIMEOUTMILL_ variable and backquoted --flag it names exists, and its podman and docker command
// lines parse, serve on 0.0.0.0 the ports they publish and stop within --stop-timeout.
func TestDeploymentDoc(t *testing.T) {
	raw, err := os.ReadFile(deployDoc)
	require.NoError(t, err)
	doc := string(raw)
	for _, path := range []string{manifestPath, unitPath, envFilePath} {
		file, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Contains(t, doc, "\n"+string(file)+"```\n", "docs/deployment.md shows %s as it is", path)
	}
	requireFlagEnvs(t, deployDoc, regexp.MustCompile(`TIMEOUTMILL_[A-Z0-9_]+`).FindAllString(doc, -1))
	containerFlags := map[string]bool{"--stop-timeout": true, "--add-host": true}
	envs := flagEnvs(t)
	flags := map[string]bool{}
	for _, name := range envs {
		flags["--"+name] = true
	}
	for _, m := range regexp.MustCompile("`(--[a-z][a-z-]*)").FindAllStringSubmatch(doc, -1) {
		require.True(t, flags[m[1]] || containerFlags[m[1]], "docs/deployment.md names %s, which is no flag", m[1])
	}

	env := readEnvFile(t, envFilePath)
	for _, tool := range []string{"podman", "docker"} {
		start := strings.Index(doc, "\n"+tool+" run ")
		require.Positive(t, start, "a %s run line", tool)
		end := strings.Index(doc[start:], "\n```")
		line := strings.ReplaceAll(doc[start+1:start+end], "\\\n", " ")
		words := strings.Fields(line)
		image := -1
		published := map[string]bool{}
		var stopTimeout time.Duration
		for i, w := range words {
			switch {
			case w == "timeoutmill:VERSION":
				image = i
			case w == "-p":
				parts := strings.Split(words[i+1], ":")
				published[parts[len(parts)-1]] = true
			case w == "--stop-timeout":
				s, err := strconv.Atoi(words[i+1])
				require.NoError(t, err)
				stopTimeout = time.Duration(s) * time.Second
			case w == "--env-file":
				require.Equal(t, "/etc/timeoutmill/"+filepath.Base(envFilePath), words[i+1])
			}
			if image >= 0 {
				break
			}
		}
		require.Positive(t, image, "%s: the image", line)
		run := parseDeployed(t, env, words[image+1:]).Run
		require.Equal(t, "orders-1", run.Instance)
		for what, addr := range map[string]string{"--http": run.HTTP, "--metrics-addr": run.MetricsAddr} {
			_, port, err := net.SplitHostPort(addr)
			require.NoError(t, err)
			require.True(t, published[port], "%s: %s's port is published", tool, what)
			p, _ := strconv.Atoi(port)
			listensOn(t, what, addr, p)
		}
		require.Greater(t, stopTimeout, run.CloseTimeout, "%s: --stop-timeout outlasts --close-timeout", tool)
	}
}
