// Package ociimage builds timeoutmill's container image without a container engine and without
// a base image: one layer holding the static binary at /timeoutmill (and, when given, a CA bundle
// and an empty /tmp), run as the numeric non-root user 65532:65532. The image has no shell and no
// other programs. Its labels say which build of timeoutmill it holds, read from the binary's own
// build information, so they cannot disagree with what `timeoutmill --version` prints.
//
// The image is written as a tarball that `podman load` and `docker load` accept.
package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed shape.
const (
	// Entrypoint is the binary's path in the image.
	Entrypoint = "/timeoutmill"
	// User is the numeric user and group the container runs as: not root, and named in no
	// /etc/passwd (there is none).
	User = "65532:65532"
	// CACertsPath is where the CA bundle goes when one is given: where Go's crypto/x509 looks
	// first on Linux.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
)

// OCI annotation keys used as labels.
const (
	LabelTitle    = "org.opencontainers.image.title"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelCreated  = "org.opencontainers.image.created"
	LabelLicenses = "org.opencontainers.image.licenses"
)

// Options says what to put into the image.
type Options struct {
	// Binary is the path of a timeoutmill binary built for linux with CGO_ENABLED=0.
	Binary string
	// Source is the repository URL for the org.opencontainers.image.source label.
	Source string
	// CACerts, when not empty, is a PEM bundle of CA certificates copied to CACertsPath so that
	// TLS connections to brokers and databases can verify their servers.
	CACerts string
}

// Build describes the binary at o.Binary: what its build information says.
type Build struct {
	Version  string    // the main module's version, e.g. v1.2.3 or a pseudo-version
	Revision string    // the VCS commit, when recorded
	Time     time.Time // the commit's time, when recorded
	Arch     string    // GOARCH
}

// ReadBuild reads and checks the build information of the binary at path: it must be a linux
// binary built without cgo (so it runs on an image with no C library) and must carry a version.
func ReadBuild(path string) (Build, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return Build{}, fmt.Errorf("%s: reading its Go build information: %w", path, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if goos := settings["GOOS"]; goos != "linux" {
		return Build{}, fmt.Errorf("%s: built for GOOS %q; the image needs a linux binary", path, goos)
	}
	if cgo := settings["CGO_ENABLED"]; cgo != "0" {
		return Build{}, fmt.Errorf("%s: built with CGO_ENABLED=%q; the image has no C library and needs CGO_ENABLED=0", path, cgo)
	}
	b := Build{Version: info.Main.Version, Revision: settings["vcs.revision"], Arch: settings["GOARCH"]}
	if b.Version == "" || b.Version == "(devel)" {
		return Build{}, fmt.Errorf("%s: has no version (%q): build it with -buildvcs=true from a git checkout, or from a tagged module", path, b.Version)
	}
	if info.Path != "github.com/timeoutmill/timeoutmill/cmd/timeoutmill" {
		return Build{}, fmt.Errorf("%s: is %q, not timeoutmill", path, info.Path)
	}
	if t := settings["vcs.time"]; t != "" {
		if b.Time, err = time.Parse(time.RFC3339, t); err != nil {
			return Build{}, fmt.Errorf("%s: vcs.time %q: %w", path, t, err)
		}
	}
	return b, nil
}

// Image builds the image for the binary o.Binary, and returns it with what the binary's build
// information says.
func Image(o Options) (v1.Image, Build, error) {
	b, err := ReadBuild(o.Binary)
	if err != nil {
		return nil, Build{}, err
	}
	binary, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, Build{}, err
	}
	// Every timestamp is the commit's time, so that the same commit gives the same image.
	created := b.Time.UTC()
	if created.IsZero() {
		created = time.Unix(0, 0).UTC()
	}
	files := []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: strings.TrimPrefix(Entrypoint, "/"), mode: 0o755, body: binary},
	}
	if o.CACerts != "" {
		pem, err := os.ReadFile(o.CACerts)
		if err != nil {
			return nil, Build{}, fmt.Errorf("CA bundle: %w", err)
		}
		if !bytes.Contains(pem, []byte("-----BEGIN CERTIFICATE-----")) {
			return nil, Build{}, fmt.Errorf("CA bundle %s: holds no PEM certificate", o.CACerts)
		}
		files = append(files,
			file{name: "etc/ssl/", mode: 0o755, dir: true},
			file{name: "etc/ssl/certs/", mode: 0o755, dir: true},
			file{name: strings.TrimPrefix(CACertsPath, "/"), mode: 0o644, body: pem})
	}
	layerTar, err := tarOf(files, created)
	if err != nil {
		return nil, Build{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, Build{}, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, Build{}, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	labels := map[string]string{
		LabelTitle:    "timeoutmill",
		LabelVersion:  b.Version,
		LabelCreated:  created.Format(time.RFC3339),
		LabelLicenses: "Apache-2.0",
	}
	if b.Revision != "" {
		labels[LabelRevision] = b.Revision
	}
	if o.Source != "" {
		labels[LabelSource] = o.Source
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, Build{}, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = b.Arch
	if b.Arch == "arm64" {
		cf.Variant = "v8"
	}
	cf.Created = v1.Time{Time: created}
	cf.Author = ""
	cf.Config = v1.Config{
		Entrypoint: []string{Entrypoint},
		User:       User,
		WorkingDir: "/",
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, Build{}, err
	}
	return img, b, nil
}

// tagSafe matches what a tag may hold (the OCI distribution spec's rule).
var tagSafe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Tag is version as an image tag: a Go version may hold "+dirty", which a tag may not.
func Tag(version string) (string, error) {
	t := strings.ReplaceAll(version, "+", "-")
	if !tagSafe.MatchString(t) {
		return "", fmt.Errorf("version %q cannot be an image tag", version)
	}
	return t, nil
}

// Write writes img to path as a tarball named repository:tag, which `podman load -i path` loads.
// The file is written beside path and renamed into place, so a failed build leaves no partial
// file.
func Write(img v1.Image, repository, tag, path string) error {
	ref, err := name.NewTag(repository + ":" + tag)
	if err != nil {
		return err
	}
	tmp := path + ".partial"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	return os.Rename(tmp, path)
}

type file struct {
	name string
	mode int64
	dir  bool
	body []byte
}

// tarOf is a layer tar of files, owned by root, with every time set to mtime.
func tarOf(files []file, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: mtime}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.body))
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := w.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
