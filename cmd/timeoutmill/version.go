package main

import (
	"runtime/debug"
	"strings"
)

// version describes the build: the module's version (a tag, a pseudo-version, or "(devel)" for a
// build from a checkout) and, when the build recorded them, the commit it was built from, that
// commit's time, and whether the checkout had changes that were not committed.
func version(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "timeoutmill (unknown version: built without module information)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var vcs []string
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		vcs = append(vcs, "revision "+rev)
	}
	if t := settings["vcs.time"]; t != "" {
		vcs = append(vcs, t)
	}
	if settings["vcs.modified"] == "true" {
		vcs = append(vcs, "modified")
	}
	out := "timeoutmill " + v
	if len(vcs) > 0 {
		out += " (" + strings.Join(vcs, ", ") + ")"
	}
	if info.GoVersion != "" {
		out += " " + info.GoVersion
	}
	return out
}

// buildVersion is version of the running binary.
func buildVersion() string {
	return version(debug.ReadBuildInfo())
}
