// Package storeopen lets timeouts.NewManager tell a store that its package's Open or New made
// from one a caller declared and never opened (a zero-value &postgres.Store{}), without reading
// the store's fields while another manager uses it.
//
// Each store of this module embeds a Mark, under an unexported alias so that it adds no exported
// field, and its constructor sets it. Nothing changes a Mark after that, so reading it never races
// with the store's own work. Mark's method is unexported: only a type that embeds a Mark has it,
// and a store from outside the module, which cannot, is Unknown.
package storeopen

// Mark records that a store's Open or New made it. The zero Mark is unset.
type Mark struct{ opened bool }

// Opened returns a set Mark, for a constructor's composite literal.
func Opened() Mark { return Mark{opened: true} }

func (m *Mark) storeOpened() bool { return m.opened }

type marked interface{ storeOpened() bool }

// State is what Check can tell about a store.
type State int

// States of a store.
const (
	// Unknown: the store carries no Mark (one from outside this module).
	Unknown State = iota
	// Open: Open or New made the store.
	Open
	// NotOpened: the store carries a Mark its constructor never set, or reaches it through a nil
	// pointer (a struct embedding a nil *memory.Store).
	NotOpened
)

// Check says whether store, which must not be nil or a nil pointer, was made by its package's
// Open or New. It reads the Mark alone, never the store's other fields.
func Check(store any) (state State) {
	m, ok := store.(marked)
	if !ok {
		return Unknown
	}
	// A type that embeds a store by pointer reaches the Mark through that pointer: nil, the
	// promoted method panics before it reads anything.
	defer func() {
		if recover() != nil {
			state = NotOpened
		}
	}()
	if m.storeOpened() {
		return Open
	}
	return NotOpened
}
