package ociimage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// PodmanEnv opts in to TestImageUnderPodman. Its value is the extra `podman run` flags this
// machine needs, or "-" for none. Where the runtime may not set resource limits or use cgroups
// as podman's defaults want, for example:
//
//	TIMEOUTMILL_TEST_PODMAN='--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024'
const PodmanEnv = "TIMEOUTMILL_TEST_PODMAN"

// TestImageUnderPodman loads the image with `podman load` and runs it: --version names the
// version in the labels, the process runs as 65532:65532, and there is no /bin/sh to run.
func TestImageUnderPodman(t *testing.T) {
	t.Parallel()
	opt, ok := os.LookupEnv(PodmanEnv)
	if !ok {
		t.Skip("set " + PodmanEnv + " to load and run the image with podman (see its comment)")
	}
	var runFlags []string
	if opt != "-" {
		runFlags = strings.Fields(opt)
	}
	podman := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	run := func(args ...string) (string, error) {
		return podman(append(append([]string{"run", "--rm", "--network=none"}, runFlags...), args...)...)
	}

	binary := goBuild(t, "cmd/timeoutmill", "linux")
	img, build, err := Image(Options{Binary: binary})
	require.NoError(t, err)
	configDigest, err := img.ConfigName()
	require.NoError(t, err)
	// A tag of its own, so that the test neither uses nor removes an image someone loaded.
	tag := "test-" + configDigest.Hex[:12] + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	path := filepath.Join(t.TempDir(), "timeoutmill.image.tar")
	require.NoError(t, Write(img, "timeoutmill", tag, path))
	ref := "timeoutmill:" + tag

	out, err := podman("load", "-i", path)
	require.NoError(t, err, out)
	t.Cleanup(func() {
		if out, err := podman("rmi", ref); err != nil {
			t.Logf("podman rmi %s: %v: %s", ref, err, out)
		}
	})
	require.Contains(t, out, "Loaded image: localhost/"+ref)
	id, err := podman("image", "inspect", "--format", "{{.Id}}", ref)
	require.NoError(t, err, id)
	require.Equal(t, configDigest.Hex, id, "the image ID is the config's digest")

	out, err = run(ref, "--version")
	require.NoError(t, err, out)
	require.True(t, strings.HasPrefix(out, "timeoutmill "+build.Version+" "), out)

	out, err = run("--entrypoint", "/bin/sh", ref, "-c", "id")
	require.Error(t, err, "the image has no shell: %s", out)
	require.Contains(t, out, "/bin/sh")

	// A service left waiting for a broker that is not there, to see who runs it.
	name := "timeoutmill-" + tag
	out, err = podman(append(append([]string{"run", "-d", "--name", name, "--network=none"}, runFlags...),
		ref, "run", "--endpoint", "e", "--store", "sqlite:///tmp/t.db", "--transport", "amqp://guest:guest@127.0.0.1:5672/")...)
	require.NoError(t, err, out)
	t.Cleanup(func() {
		if out, err := podman("rm", "-f", name); err != nil {
			t.Logf("podman rm -f %s: %v: %s", name, err, out)
		}
	})
	out, err = podman("top", name, "user", "group", "args")
	require.NoError(t, err, out)
	lines := strings.Split(out, "\n")
	require.Len(t, lines, 2, out)
	fields := strings.Fields(lines[1])
	require.Equal(t, []string{"65532", "65532", "/timeoutmill"}, fields[:3], out)
}
