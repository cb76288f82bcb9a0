package testenv

import (
	"os"
	"testing"
)

// ChromiumEnv names the Chromium binary the browser tests drive; scripts/test.sh sets it after
// scripts/chromium.sh has installed Debian's chromium.
const ChromiumEnv = "TIMEOUTMILL_TEST_CHROMIUM"

// debianChromium is where Debian's chromium package puts the browser.
const debianChromium = "/usr/bin/chromium"

// Chromium returns the path of a headless-capable Chromium: ChromiumEnv, or Debian's
// /usr/bin/chromium when it is installed. Without one it skips t, and fails it under CI, where
// `make test` installs it.
func Chromium(t testing.TB) string {
	t.Helper()
	getenv := func(name string) string {
		if v := os.Getenv(name); v != "" || name != ChromiumEnv {
			return v
		}
		if _, err := os.Stat(debianChromium); err == nil {
			return debianChromium
		}
		return ""
	}
	value, fatal, msg := lookup(server{name: "Chromium", env: ChromiumEnv, startedByMakeTest: true}, getenv)
	switch {
	case value != "":
		return value
	case fatal:
		t.Fatal(msg + " (scripts/chromium.sh installs it)")
	default:
		t.Skip(msg + " (scripts/chromium.sh installs it)")
	}
	return ""
}
