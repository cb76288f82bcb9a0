// Package configerr holds the one error every configuration error of timeoutmill wraps, whatever
// the package: each package's ErrInvalidConfig is this same value, so errors.Is with any of them
// matches a configuration error from all of them.
package configerr

import "errors"

// ErrInvalidConfig is wrapped by every configuration error of the module.
var ErrInvalidConfig = errors.New("timeoutmill: invalid configuration")
