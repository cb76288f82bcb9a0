package sqlstore

import (
	"database/sql"
	"math/bits"
	"strconv"
)

// IDList is how the statements made for n ids (Queries.PeekIn and the others) take them.
type IDList int

const (
	// IDsEach binds each id as a string column's value: IN (?, ?, …).
	IDsEach IDList = iota
	// IDsArray binds the ids as one array: = ANY($1) (PostgreSQL).
	IDsArray
	// IDsNamed binds each id by name, @id0, @id1, … (SQL Server).
	IDsNamed
)

// in returns the statement that statement makes for ids, and its arguments. With
// Binding.PadIn, a list of n ids is bound as one of InSize(n), its last id repeated, so that a
// few statements serve every batch.
func (b *Binding) in(statement func(n int) string, ids []string) (string, []any) {
	n := len(ids)
	if b.PadIn {
		n = InSize(n)
	}
	if b.IDs == IDsArray {
		return statement(n), []any{ids}
	}
	args := make([]any, n)
	for i := range args {
		id := ids[min(i, len(ids)-1)]
		if b.IDs == IDsNamed {
			args[i] = sql.Named("id"+strconv.Itoa(i), id)
		} else {
			args[i] = b.text(id)
		}
	}
	return statement(n), args
}

// InSize is the length of the list that binds n ids under Binding.PadIn: the next power of two.
func InSize(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// InSizes returns the lengths of the lists Binding.PadIn binds for up to max ids, max a power of
// two.
func InSizes(max int) []int {
	var sizes []int
	for n := 1; n <= max; n *= 2 {
		sizes = append(sizes, n)
	}
	return sizes
}
