package critical

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = errors.New("critical: invalid configuration")

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}
