package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Style is how a database's driver takes a statement's parameters. Statements are written once
// with named parameters (@name); Compile rewrites them in the dialect's style.
type Style int

const (
	// Positional binds ? in order: a name used twice is bound twice (MariaDB, SQLite).
	Positional Style = iota
	// Numbered binds $1, $2, …: a name used twice gets one number (PostgreSQL).
	Numbered
	// Named binds @name with sql.Named, and sends the text as it is (SQL Server).
	Named
)

// Params are the inputs of one kind of statement. Bind gives every name, always the same names
// in the same order, whatever the values: Compile reads the names from the zero value.
type Params interface {
	Bind(b *Binder)
}

// Binder collects the values a Params gives, converted as the dialect binds them.
type Binder struct {
	binding *Binding
	names   []string // only while compiling
	vals    []any
}

func (b *Binder) add(name string, v any) {
	if b.names != nil {
		b.names = append(b.names, name)
	}
	b.vals = append(b.vals, v)
}

// Text binds a string column's value.
func (b *Binder) Text(name, s string) { b.add(name, b.binding.text(s)) }

// NullText binds a string column's value, NULL when s is empty.
func (b *Binder) NullText(name, s string) {
	if s == "" {
		b.add(name, nil)
		return
	}
	b.Text(name, s)
}

// Time binds a time, sent in UTC as the binding says; the caller rounds it to the microsecond.
func (b *Binder) Time(name string, t time.Time) { b.add(name, b.binding.time(t)) }

// Int binds a number.
func (b *Binder) Int(name string, n int) { b.add(name, int64(n)) }

// Bytes binds a binary column's value.
func (b *Binder) Bytes(name string, v []byte) { b.add(name, v) }

// Value binds v as it is: a value the driver takes whole, such as a PostgreSQL array.
func (b *Binder) Value(name string, v any) { b.add(name, v) }

// Stmt is a statement compiled for a dialect, which takes its parameters from a P.
type Stmt[P Params] struct {
	// SQL is the statement as sent.
	SQL string
	// named are the names bound with sql.Named (Named style), nil otherwise.
	named []string
	// from is, for each argument sent, the index of its value in what P's Bind gives.
	from    []int
	binding *Binding
}

// argsBuf holds what one call of Args makes, in one allocation for the statements the store
// runs (a slice outgrows its array on its own).
type argsBuf struct {
	b    Binder
	vals [8]any
	args [9]any
}

// Args returns the arguments of the statement for p.
func (s *Stmt[P]) Args(p P) []any {
	if len(s.from) == 0 {
		return nil
	}
	buf := &argsBuf{}
	buf.b = Binder{binding: s.binding, vals: buf.vals[:0]}
	p.Bind(&buf.b)
	args := buf.args[:0]
	for i, j := range s.from {
		v := buf.b.vals[j]
		if s.named != nil {
			v = sql.Named(s.named[i], v)
		}
		args = append(args, v)
	}
	return args
}

// Compile rewrites text, written with @name parameters, in the binding's style, and checks that
// the names it uses are exactly those P gives. Empty text compiles to an empty statement.
func Compile[P Params](binding *Binding, text string) (Stmt[P], error) {
	var zero P
	b := Binder{binding: binding, names: []string{}}
	zero.Bind(&b)
	given := b.names
	sent, used, err := rewrite(binding.Style, text)
	if err != nil {
		return Stmt[P]{}, err
	}
	s := Stmt[P]{SQL: sent, binding: binding}
	if text == "" {
		return s, nil
	}
	for _, name := range used {
		i := slices.Index(given, name)
		if i < 0 {
			return Stmt[P]{}, fmt.Errorf("the statement uses @%s, which %T does not give:\n%s", name, zero, text)
		}
		s.from = append(s.from, i)
		if binding.Style == Named {
			s.named = append(s.named, name)
		}
	}
	for _, name := range given {
		if !slices.Contains(used, name) {
			return Stmt[P]{}, fmt.Errorf("%T gives @%s, which the statement does not use:\n%s", zero, name, text)
		}
	}
	return s, nil
}

// rewrite returns text with its parameters in style's form, and the name of each argument to
// send, in order. It skips quoted text ('…', "…", `…`, […]) and comments, where an @ is not a
// parameter, and @@ (a T-SQL system function such as @@ROWCOUNT).
func rewrite(style Style, text string) (string, []string, error) {
	var (
		out  strings.Builder
		args []string
		seen []string // Numbered: each name once, by number
	)
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '\'' || c == '"' || c == '`' || c == '[':
			end, err := closeQuote(text, i)
			if err != nil {
				return "", nil, err
			}
			out.WriteString(text[i:end])
			i = end
		case strings.HasPrefix(text[i:], "--"):
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				end = len(text) - i
			}
			out.WriteString(text[i : i+end])
			i += end
		case strings.HasPrefix(text[i:], "/*"):
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				return "", nil, errors.New("a comment is not closed")
			}
			out.WriteString(text[i : i+2+end+2])
			i += 2 + end + 2
		case strings.HasPrefix(text[i:], "@@"):
			j := i + 2
			for j < len(text) && isNameByte(text[j]) {
				j++
			}
			out.WriteString(text[i:j])
			i = j
		case c == '@' && i+1 < len(text) && isNameStart(text[i+1]):
			j := i + 1
			for j < len(text) && isNameByte(text[j]) {
				j++
			}
			name := text[i+1 : j]
			i = j
			switch style {
			case Positional:
				out.WriteByte('?')
				args = append(args, name)
			case Numbered:
				k := slices.Index(seen, name)
				if k < 0 {
					seen = append(seen, name)
					args = append(args, name)
					k = len(seen) - 1
				}
				out.WriteString("$" + strconv.Itoa(k+1))
			case Named:
				out.WriteString("@" + name)
				if !slices.Contains(args, name) {
					args = append(args, name)
				}
			}
		default:
			out.WriteByte(c)
			i++
		}
	}
	return out.String(), args, nil
}

// closeQuote returns the index after the quoted text that starts at text[i]; a closing quote
// written twice stands for itself.
func closeQuote(text string, i int) (int, error) {
	closing := text[i]
	if closing == '[' {
		closing = ']'
	}
	for j := i + 1; j < len(text); j++ {
		if text[j] != closing {
			continue
		}
		if j+1 < len(text) && text[j+1] == closing {
			j++
			continue
		}
		return j + 1, nil
	}
	return 0, fmt.Errorf("a quote %c opened at byte %d is not closed", text[i], i)
}

func isNameStart(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isNameByte(c byte) bool { return isNameStart(c) || '0' <= c && c <= '9' }
