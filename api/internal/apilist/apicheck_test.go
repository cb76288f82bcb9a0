package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAPICheckRule runs scripts/apicheck.sh on apidiff reports written by hand, against changelogs
// written by hand, to hold the rule docs/releasing.md states: an incompatible change passes only
// when a **Breaking** entry of [Unreleased] names it.
func TestAPICheckRule(t *testing.T) {
	const head = "# Changelog\n\n## [Unreleased]\n\n### Changed\n\n"
	const released = "\n## [0.1.0] - 2026-01-01\n\n### Changed\n\n- **Breaking:** `wire.FormatExpire` went.\n"
	cases := []struct {
		name, report, changelog string
		pass                    bool
		says                    string
	}{
		{"an unnamed removal fails",
			"Incompatible changes:\n- ./wire.FormatExpire: removed\n", head + "- Something else.\n", false,
			"INCOMPATIBLE, NOT NAMED: wire.FormatExpire"},
		{"a Breaking entry that names it passes",
			"Incompatible changes:\n- ./wire.FormatExpire: removed\n",
			head + "- **Breaking:** `wire.FormatExpire` is gone.\n  Migration: format it yourself.\n", true, ""},
		{"a name on a continuation line of the entry counts",
			"Incompatible changes:\n- ./wire.FormatExpire: removed\n",
			head + "- **Breaking:** gone:\n  `wire.FormatExpire`. Migration: none.\n", true, ""},
		{"an entry without Breaking does not count",
			"Incompatible changes:\n- ./wire.FormatExpire: removed\n",
			head + "- `wire.FormatExpire` is gone.\n", false, "NOT NAMED: wire.FormatExpire"},
		{"an entry of a released version does not count",
			"Incompatible changes:\n- ./wire.FormatExpire: removed\n", head + "- Nothing.\n" + released, false,
			"NOT NAMED: wire.FormatExpire"},
		{"Breaking in another entry does not lend itself",
			"Incompatible changes:\n- ./wire.FormatExpire: removed\n",
			head + "- **Breaking:** `wire.Other` went.\n- `wire.FormatExpire` is gone.\n", false, "NOT NAMED"},
		{"a longer name is not the name",
			"Incompatible changes:\n- ./wire.FormatExpire: removed\n",
			head + "- **Breaking:** `wire.FormatExpireAt` is gone.\n", false, "NOT NAMED"},
		{"a method's receiver is named without (*...)",
			"Incompatible changes:\n- ./timeouts.(*Manager).CancelByOwner: changed from func() to func(int)\n",
			head + "- **Breaking** `timeouts.Manager.CancelByOwner` takes an int.\n", true, ""},
		{"a type's name does not cover its field",
			"Incompatible changes:\n- ./recoverability.Config.Endpoint: removed\n",
			head + "- **Breaking:** `recoverability.Config` changed.\n", false, "NOT NAMED: recoverability.Config.Endpoint"},
		{"a field's name covers a change reported on its type",
			"Incompatible changes:\n- ./persistence.Stats: old is comparable, new is not\n",
			head + "- **Breaking:** `persistence.Stats.ByDestination` is a map.\n", true, ""},
		{"a nested package is named by its package name",
			"Incompatible changes:\n- ./persistence/memory.(*Store).Stats: changed from func() to func(int)\n",
			head + "- **Breaking:** `memory.Store.Stats` takes a time.\n", true, ""},
		{"a method promoted from an internal type is named on a public type",
			"Incompatible changes:\n- ./internal/sqlstore.(*Store).Stats: changed from func() to func(int)\n",
			head + "- **Breaking:** `postgres.Store.Stats` takes a time.\n", true, ""},
		{"a removed package is named by its path",
			"Incompatible changes:\n- package github.com/timeoutmill/timeoutmill/persistence/storetest: removed\n",
			head + "- **Breaking:** `persistence/storetest` is gone.\n", true, ""},
		{"a removed package unnamed fails",
			"Incompatible changes:\n- package github.com/timeoutmill/timeoutmill/persistence/storetest: removed\n",
			head + "- **Breaking:** `storetest.Run` is gone.\n", false, "NOT NAMED: `persistence/storetest`"},
		{"commands, examples and the acceptance suite are outside the promise",
			"Incompatible changes:\n- ./cmd/timeoutmill.Main: removed\n- ./acceptance.Scenario: removed\n" +
				"- package github.com/timeoutmill/timeoutmill/examples/usage: removed\n",
			head + "- Nothing.\n", true, ""},
		{"compatible changes pass",
			"Compatible changes:\n- ./wire.FormatExpire: added\n- package github.com/timeoutmill/timeoutmill/critical: added\n",
			head + "- Nothing.\n", true, "2 compatible"},
		{"a line it cannot read fails",
			"Incompatible changes:\n- something new: removed\n", head + "- Nothing.\n", false, "cannot read"},
	}
	script, err := filepath.Abs("../../../scripts/apicheck.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			report := filepath.Join(dir, "report")
			changelog := filepath.Join(dir, "CHANGELOG.md")
			if err := os.WriteFile(report, []byte(c.report), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(changelog, []byte(c.changelog), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", script)
			cmd.Env = append(os.Environ(), "APICHECK_REPORT="+report, "APICHECK_CHANGELOG="+changelog)
			out, err := cmd.CombinedOutput()
			if c.pass && err != nil {
				t.Fatalf("failed, want a pass: %v\n%s", err, out)
			}
			if !c.pass && err == nil {
				t.Fatalf("passed, want a failure:\n%s", out)
			}
			if !strings.Contains(string(out), c.says) {
				t.Fatalf("output lacks %q:\n%s", c.says, out)
			}
		})
	}
}
