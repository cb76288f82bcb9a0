package ociimage

import (
	"archive/tar"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"
)

// moduleRoot is the directory holding go.mod, two levels up from this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	return root
}

// goBuild builds pkg (relative to the module root) for goos and the machine's architecture the
// way a release does: static, trimmed, with the version and commit recorded from git. Each of
// overrides is an environment variable (NAME=value) or a go build flag (-flag=value) that
// replaces the release's.
func goBuild(t *testing.T, pkg, goos string, overrides ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+runtime.GOARCH)
	args := []string{"build", "-trimpath", "-buildvcs=true", "-ldflags=-s -w"}
	for _, o := range overrides {
		if strings.HasPrefix(o, "-") {
			args = append(args, o) // the last of a repeated flag wins
		} else {
			env = append(env, o) // so does the last of a repeated variable
		}
	}
	cmd := exec.Command("go", append(args, "-o", out, "./"+pkg)...)
	cmd.Dir = moduleRoot(t)
	cmd.Env = env
	output, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", pkg, output)
	return out
}

// caBundle writes a PEM bundle with one self-signed CA certificate.
func caBundle(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ociimage test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	return path
}

// TestImage builds the image for a linux build of timeoutmill for this machine's architecture,
// reads the written tarball back as `podman load` would, and checks its config and its one
// layer; then it runs the binary taken out of the layer.
func TestImage(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed to record the commit in the binary:", err)
	}
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", moduleRoot(t)}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	before, err := git("rev-parse", "HEAD")
	require.NoError(t, err)
	binary := goBuild(t, "cmd/timeoutmill", "linux")
	ca := caBundle(t)

	img, build, err := Image(Options{Binary: binary, Source: "https://example.test/timeoutmill", CACerts: ca})
	require.NoError(t, err)
	// The binary records the commit checked out when it was built: HEAD, or a later commit made
	// in this checkout while it was being built.
	_, err = git("merge-base", "--is-ancestor", before, build.Revision)
	require.NoError(t, err, "HEAD %s before the build is an ancestor of the binary's revision %q", before, build.Revision)
	_, err = git("merge-base", "--is-ancestor", build.Revision, "HEAD")
	require.NoError(t, err, "the binary's revision %q is HEAD or an ancestor of it", build.Revision)
	require.Equal(t, runtime.GOARCH, build.Arch)
	tag, err := Tag(build.Version)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "timeoutmill.image.tar")
	require.NoError(t, Write(img, "timeoutmill", tag, path))

	// Read it back from the file, by the tag it was written with.
	ref, err := name.NewTag("timeoutmill:" + tag)
	require.NoError(t, err)
	loaded, err := tarball.ImageFromPath(path, &ref)
	require.NoError(t, err)
	// A docker-archive tarball keeps the config and the layers, not the manifest: the config's
	// digest is the image ID that `podman load` reports.
	want, err := img.ConfigName()
	require.NoError(t, err)
	got, err := loaded.ConfigName()
	require.NoError(t, err)
	require.Equal(t, want, got, "the tarball holds the config that was built")
	wantLayers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, wantLayers, 1)
	wantLayer, err := wantLayers[0].Digest()
	require.NoError(t, err)

	cf, err := loaded.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, "linux", cf.OS)
	require.Equal(t, runtime.GOARCH, cf.Architecture)
	require.Equal(t, []string{"/timeoutmill"}, cf.Config.Entrypoint)
	require.Empty(t, cf.Config.Cmd)
	require.Equal(t, "65532:65532", cf.Config.User)
	for _, id := range strings.Split(cf.Config.User, ":") {
		n, err := strconv.Atoi(id)
		require.NoError(t, err, "numeric, since the image has no /etc/passwd")
		require.NotZero(t, n, "not root")
	}
	require.Equal(t, map[string]string{
		"org.opencontainers.image.title":    "timeoutmill",
		"org.opencontainers.image.version":  build.Version,
		"org.opencontainers.image.revision": build.Revision,
		"org.opencontainers.image.source":   "https://example.test/timeoutmill",
		"org.opencontainers.image.created":  build.Time.UTC().Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}, cf.Config.Labels)
	require.Regexp(t, `^v\d+\.\d+\.\d+`, build.Version, "a semantic version from git, not (devel)")
	require.Equal(t, build.Time.UTC(), cf.Created.UTC(), "created at the commit's time")

	// The one layer: the binary, the CA bundle, /tmp; no shell, nothing else.
	layers, err := loaded.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	gotLayer, err := layers[0].Digest()
	require.NoError(t, err)
	require.Equal(t, wantLayer, gotLayer, "the tarball holds the layer that was built")
	files := layerFiles(t, layers[0])
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	require.ElementsMatch(t, []string{
		"etc/", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt", "tmp/", "timeoutmill",
	}, names)
	for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/env"} {
		require.NotContains(t, files, shell)
	}
	exe := files["timeoutmill"]
	require.Equal(t, int64(0o755), exe.header.Mode)
	require.Equal(t, int64(0o1777), files["tmp/"].header.Mode, "writable by the non-root user")
	wantCA, err := os.ReadFile(ca)
	require.NoError(t, err)
	require.Equal(t, wantCA, files["etc/ssl/certs/ca-certificates.crt"].body)
	for n, f := range files {
		require.Zero(t, f.header.Uid, n)
		require.Zero(t, f.header.Gid, n)
		require.True(t, f.header.ModTime.Equal(build.Time), n)
	}

	// Run the binary the image holds.
	extracted := filepath.Join(t.TempDir(), "timeoutmill")
	require.NoError(t, os.WriteFile(extracted, exe.body, 0o755))
	out, err := exec.Command(extracted, "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	version := strings.TrimSpace(string(out))
	require.True(t, strings.HasPrefix(version, "timeoutmill "+cf.Config.Labels["org.opencontainers.image.version"]+" (revision "+
		cf.Config.Labels["org.opencontainers.image.revision"]), "--version: %q", version)
	out, err = exec.Command(extracted, "run", "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--store")

	// The same binary gives the same image.
	again, _, err := Image(Options{Binary: binary, Source: "https://example.test/timeoutmill", CACerts: ca})
	require.NoError(t, err)
	imgDigest, err := img.Digest()
	require.NoError(t, err)
	againDigest, err := again.Digest()
	require.NoError(t, err)
	require.Equal(t, imgDigest, againDigest, "reproducible")

	// Without a CA bundle the layer holds no /etc/ssl.
	bare, _, err := Image(Options{Binary: binary})
	require.NoError(t, err)
	bareLayers, err := bare.Layers()
	require.NoError(t, err)
	bareFiles := layerFiles(t, bareLayers[0])
	require.NotContains(t, bareFiles, "etc/ssl/certs/ca-certificates.crt")
	require.Contains(t, bareFiles, "timeoutmill")
	bareConfig, err := bare.ConfigFile()
	require.NoError(t, err)
	require.NotContains(t, bareConfig.Config.Labels, "org.opencontainers.image.source")
}

type layerFile struct {
	header *tar.Header
	body   []byte
}

// layerFiles lists the layer's entries by name.
func layerFiles(t *testing.T, layer v1.Layer) map[string]layerFile {
	t.Helper()
	rc, err := layer.Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	files := map[string]layerFile{}
	r := tar.NewReader(rc)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		body, err := io.ReadAll(r)
		require.NoError(t, err)
		require.NotContains(t, files, h.Name, "one entry per name")
		files[h.Name] = layerFile{header: h, body: body}
	}
}

// TestReadBuildRefuses: only a static linux build of timeoutmill with a version makes an image.
func TestReadBuildRefuses(t *testing.T) {
	t.Parallel()
	const other = "internal/release/ociimage/testdata/notimeoutmill"
	for _, c := range []struct {
		name, goos, cgo, buildvcs, want string
	}{
		{"not linux", "darwin", "0", "true", "needs a linux binary"},
		{"cgo", "linux", "1", "true", "needs CGO_ENABLED=0"},
		{"no version", "linux", "0", "false", "has no version"},
		{"not timeoutmill", "linux", "0", "true", "not timeoutmill"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			binary := goBuild(t, other, c.goos, "CGO_ENABLED="+c.cgo, "-buildvcs="+c.buildvcs)
			_, err := ReadBuild(binary)
			require.ErrorContains(t, err, c.want)
			_, _, err = Image(Options{Binary: binary})
			require.ErrorContains(t, err, c.want)
		})
	}
	_, err := ReadBuild(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
}

func TestTag(t *testing.T) {
	t.Parallel()
	for version, want := range map[string]string{
		"v1.2.3": "v1.2.3",
		"v0.7.1-0.20261127171643-cff00af6cac0+dirty": "v0.7.1-0.20261127171643-cff00af6cac0-dirty",
	} {
		got, err := Tag(version)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, version := range []string{"", "(devel)", "-v1", strings.Repeat("1", 129)} {
		_, err := Tag(version)
		require.Error(t, err, version)
	}
}
