package sqlite

import "github.com/timeoutmill/timeoutmill/internal/storeopen"

// openMark records that Open or New made the store: timeouts.NewManager reads it, and no other
// field, to refuse a store that was never opened without racing with one in use.
type openMark = storeopen.Mark // embedded by this name: no exported field

// opened is the mark newStore sets.
func opened() openMark { return storeopen.Opened() }
