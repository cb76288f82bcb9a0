//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlite

import (
	"errors"
	"os"
)

// lockFile cannot lock a file on this platform: HoldInstance fails, and a timeout manager with
// an instance name cannot start on this store here.
func lockFile(*os.File) (bool, error) {
	return false, errors.New("holding an instance name needs flock, which this platform lacks")
}
