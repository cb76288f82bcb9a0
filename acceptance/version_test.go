package acceptance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionNamesTheCommit: `timeoutmill --version` of a binary built from a git checkout names
// the commit it was built from, as the build recorded it. The build asks for the VCS stamp
// (-buildvcs=true), which a GOFLAGS of -buildvcs=false would leave out.
func TestVersionNamesTheCommit(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds cmd/timeoutmill; skipped with -short")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (git rev-parse HEAD: %v): no commit to name", err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err)
	if info, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !info.IsDir() {
		t.Skip("a git worktree (.git is a file): go build records no VCS information there; a clone does")
	}
	bin := filepath.Join(t.TempDir(), "timeoutmill")
	out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "github.com/timeoutmill/timeoutmill/cmd/timeoutmill").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)

	out, err = exec.Command(bin, "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	version := string(out)
	t.Logf("%s", version)
	require.True(t, strings.HasPrefix(version, "timeoutmill "), version)
	require.Contains(t, version, "(revision "+strings.TrimSpace(string(head))+", ")
	require.Equal(t, 1, strings.Count(version, "\n"), "one line")
}
