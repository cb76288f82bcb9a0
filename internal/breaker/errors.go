package breaker

import (
	"fmt"

	"github.com/timeoutmill/timeoutmill/internal/configerr"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = configerr.ErrInvalidConfig

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}
