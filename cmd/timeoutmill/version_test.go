package main

import (
	"context"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	build := func(version string, settings ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/timeoutmill/timeoutmill", Version: version}}
		for i := 0; i < len(settings); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return info
	}
	rev := "44c0d6a1f2e3d4c5b6a79881726354453627181a"
	for want, info := range map[string]*debug.BuildInfo{
		"timeoutmill v1.2.3 go1.26.0":  build("v1.2.3"), // go install ...@v1.2.3: no VCS in a module zip
		"timeoutmill (devel) go1.26.0": build("(devel)", "-buildvcs", "false"),
		"timeoutmill v0.0.0-20261125191200-44c0d6a1f2e3+dirty (revision " + rev + ", 2026-11-25T19:12:00Z, modified) go1.26.0": build(
			"v0.0.0-20261125191200-44c0d6a1f2e3+dirty", "vcs", "git", "vcs.revision", rev, "vcs.time", "2026-11-25T19:12:00Z", "vcs.modified", "true"),
		"timeoutmill (devel) (revision " + rev + ", 2026-11-25T19:12:00Z) go1.26.0": build(
			"(devel)", "vcs.revision", rev, "vcs.time", "2026-11-25T19:12:00Z", "vcs.modified", "false"),
	} {
		require.Equal(t, want, version(info, true))
	}
	require.Equal(t, "timeoutmill (devel)", version(&debug.BuildInfo{}, true), "no version recorded")
	require.Contains(t, version(nil, false), "unknown version")
}

// TestVersionFlag: --version prints what the running binary's build information says, and exits
// 0 without a command.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := timeoutmill(context.Background(), "--version")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, buildVersion()+"\n", stdout)
	require.True(t, strings.HasPrefix(stdout, "timeoutmill "), stdout)
	info, ok := debug.ReadBuildInfo()
	require.True(t, ok)
	require.Contains(t, stdout, info.GoVersion)
}
