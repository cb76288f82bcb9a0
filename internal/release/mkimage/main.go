// Command mkimage writes timeoutmill's container image for one linux binary as a tarball that
// `podman load -i` (or `docker load -i`) accepts, without a container engine and without pulling a
// base image. `make release-snapshot` runs it for each linux binary the release builds:
//
//	go run ./internal/release/mkimage -binary dist/timeoutmill_linux_amd64_v1/timeoutmill \
//	    -tag 1.2.3 -out dist/timeoutmill_1.2.3_linux_amd64.image.tar
//
// The image is tagged timeoutmill:TAG; its labels carry the version and commit recorded in the
// binary (see package ociimage).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/timeoutmill/timeoutmill/internal/release/ociimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	binary := fs.String("binary", "", "a timeoutmill binary built for linux with CGO_ENABLED=0 (required)")
	out := fs.String("out", "", "the tarball to write (required)")
	repository := fs.String("repository", "timeoutmill", "the image's name")
	tag := fs.String("tag", "", "the image's tag (default: the binary's version, with + made -)")
	source := fs.String("source", "https://github.com/timeoutmill/timeoutmill", "the org.opencontainers.image.source label")
	caCerts := fs.String("ca-certs", "", "a PEM CA bundle to place at "+ociimage.CACertsPath+" (default: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("-binary and -out are required, and nothing else")
	}
	img, build, err := ociimage.Image(ociimage.Options{Binary: *binary, Source: *source, CACerts: *caCerts})
	if err != nil {
		return err
	}
	if *tag == "" {
		if *tag, err = ociimage.Tag(build.Version); err != nil {
			return err
		}
	}
	if err := ociimage.Write(img, *repository, *tag, *out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s:%s linux/%s, timeoutmill %s, %s\n", *out, *repository, *tag, build.Arch, build.Version, digest)
	return nil
}
