package sqlserver

import (
	"fmt"
	"strings"
	"unicode"
)

// This file is a T-SQL lexer for the tests: no SQL Server runs here, so the statements are
// checked as far as tokens can tell (see sqlcheck_test.go). It knows the lexical rules the
// statements rely on: 'strings' and N'strings' with '' inside, [identifiers] with ]] inside,
// "identifiers", -- and /* */ comments, @variables and @@functions.

type tokenKind int

const (
	tokWord     tokenKind = iota // keyword, function or unquoted name
	tokBracket                   // [name]; text is the name, ]] undoubled
	tokQuoted                    // "name"
	tokString                    // 'text' or N'text'; text is the content, '' undoubled
	tokVariable                  // @name; text is the name without @
	tokSystem                    // @@NAME
	tokNumber                    // 123
	tokComment                   // -- ... or /* ... */
	tokPunct                     // ( ) , ; . = < > <= >= <> + - * /
)

func (k tokenKind) String() string {
	return [...]string{"word", "bracket", "quoted", "string", "variable", "system", "number", "comment", "punct"}[k]
}

type token struct {
	kind tokenKind
	text string
	// unicode is set on N'...' strings.
	unicode bool
}

func (t token) String() string {
	switch t.kind {
	case tokBracket:
		return "[" + strings.ReplaceAll(t.text, "]", "]]") + "]"
	case tokString:
		prefix := ""
		if t.unicode {
			prefix = "N"
		}
		return prefix + "'" + strings.ReplaceAll(t.text, "'", "''") + "'"
	case tokVariable:
		return "@" + t.text
	}
	return t.text
}

// lex splits T-SQL into tokens. It fails on what SQL Server would fail to tokenize: an
// unterminated string, bracket, quoted name or comment, or a character outside the language.
func lex(sql string) ([]token, error) {
	var toks []token
	rs := []rune(sql)
	for i := 0; i < len(rs); {
		r := rs[i]
		next := func(k int) rune {
			if i+k < len(rs) {
				return rs[i+k]
			}
			return 0
		}
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '-' && next(1) == '-':
			end := i
			for end < len(rs) && rs[end] != '\n' {
				end++
			}
			toks = append(toks, token{kind: tokComment, text: string(rs[i:end])})
			i = end
		case r == '/' && next(1) == '*':
			depth, end := 0, i
			for end < len(rs) {
				if rs[end] == '/' && end+1 < len(rs) && rs[end+1] == '*' {
					depth++
					end += 2
				} else if rs[end] == '*' && end+1 < len(rs) && rs[end+1] == '/' {
					depth--
					end += 2
					if depth == 0 {
						break
					}
				} else {
					end++
				}
			}
			if depth != 0 {
				return nil, fmt.Errorf("unterminated /* comment at rune %d", i)
			}
			toks = append(toks, token{kind: tokComment, text: string(rs[i:end])})
			i = end
		case r == '\'' || (r == 'N' || r == 'n') && next(1) == '\'':
			uni := r != '\''
			if uni {
				i++
			}
			text, end, ok := delimited(rs, i, '\'')
			if !ok {
				return nil, fmt.Errorf("unterminated string literal at rune %d", i)
			}
			toks = append(toks, token{kind: tokString, text: text, unicode: uni})
			i = end
		case r == '[':
			text, end, ok := delimited(rs, i, ']')
			if !ok {
				return nil, fmt.Errorf("unterminated [identifier] at rune %d", i)
			}
			toks = append(toks, token{kind: tokBracket, text: text})
			i = end
		case r == '"':
			text, end, ok := delimited(rs, i, '"')
			if !ok {
				return nil, fmt.Errorf("unterminated \"identifier\" at rune %d", i)
			}
			toks = append(toks, token{kind: tokQuoted, text: text})
			i = end
		case r == '@':
			kind, start := tokVariable, i+1
			if next(1) == '@' {
				kind, start = tokSystem, i+2
			}
			end := start
			for end < len(rs) && isWordRune(rs[end]) {
				end++
			}
			if end == start {
				return nil, fmt.Errorf("@ without a name at rune %d", i)
			}
			text := string(rs[start:end])
			if kind == tokSystem {
				text = "@@" + text
			}
			toks = append(toks, token{kind: kind, text: text})
			i = end
		case unicode.IsLetter(r) || r == '_' || r == '#':
			end := i
			for end < len(rs) && (isWordRune(rs[end]) || rs[end] == '#') {
				end++
			}
			toks = append(toks, token{kind: tokWord, text: string(rs[i:end])})
			i = end
		case unicode.IsDigit(r):
			end := i
			for end < len(rs) && unicode.IsDigit(rs[end]) {
				end++
			}
			toks = append(toks, token{kind: tokNumber, text: string(rs[i:end])})
			i = end
		case strings.ContainsRune("<>", r) && (next(1) == '=' || r == '<' && next(1) == '>'):
			toks = append(toks, token{kind: tokPunct, text: string(rs[i : i+2])})
			i += 2
		case strings.ContainsRune("(),;.=<>+-*/", r):
			toks = append(toks, token{kind: tokPunct, text: string(r)})
			i++
		default:
			return nil, fmt.Errorf("unexpected %q at rune %d", r, i)
		}
	}
	return toks, nil
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '$'
}

// delimited reads a run that opens at rs[i] and closes at the first close that is not doubled,
// and returns its content with doubled closes undoubled and the index after it.
func delimited(rs []rune, i int, close rune) (string, int, bool) {
	var b strings.Builder
	for j := i + 1; j < len(rs); j++ {
		if rs[j] != close {
			b.WriteRune(rs[j])
			continue
		}
		if j+1 < len(rs) && rs[j+1] == close {
			b.WriteRune(close)
			j++
			continue
		}
		return b.String(), j + 1, true
	}
	return "", 0, false
}
