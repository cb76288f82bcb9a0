package docnames

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// checked lists the documents that walk through the code by name.
var checked = []string{"docs/architecture.md"}

// conventions are names the documents use that are not Go identifiers: queue names built
// from the endpoint.
var conventions = map[string]bool{
	"E.Timeouts":           true,
	"E.TimeoutsDispatcher": true,
}

var (
	codeSpan   = regexp.MustCompile("`([^`\n]+)`")
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	fileName   = regexp.MustCompile(`^[A-Za-z0-9_./-]+\.(go|sh|md|yaml)$`)
)

func TestDocumentsNameOnlyWhatTheCodeHas(t *testing.T) {
	root := moduleRoot(t)
	names := declared(t, root)
	for _, doc := range checked {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range codeSpan.FindAllStringSubmatch(string(text), -1) {
			span := m[1]
			switch {
			case conventions[span]:
			case fileName.MatchString(span):
				if !names.files[filepath.Base(span)] {
					t.Errorf("%s names the file %s, which the module does not have", doc, span)
				}
			case identifier.MatchString(span):
				if !names.has(span) {
					t.Errorf("%s names %s, which the code does not declare", doc, span)
				}
			}
		}
	}
}

// TestTheCheckFindsAMissingName keeps the check honest: a name nobody declares is caught.
func TestTheCheckFindsAMissingName(t *testing.T) {
	names := declared(t, moduleRoot(t))
	for _, gone := range []string{"pollingSubscriber", "Manager.noSuchMethod", "nosuchpkg.Store"} {
		if names.has(gone) {
			t.Errorf("%s is taken for declared", gone)
		}
	}
	for _, there := range []string{"Manager", "Manager.Schedule", "persistence.Store", "timeout.due", "ClaimDue"} {
		if !names.has(there) {
			t.Errorf("%s is not found", there)
		}
	}
}

type names struct {
	idents   map[string]bool // every declared name, and Type.Member for methods and fields
	packages map[string]bool
	strings  map[string]bool // values of string constants: header names such as timeout.due
	files    map[string]bool
}

// has reports whether the code declares the name: an identifier, Type.Member, pkg.Name,
// pkg.Type.Member, or the value of a string constant.
func (n names) has(name string) bool {
	if n.idents[name] || n.strings[name] || n.packages[name] {
		return true
	}
	parts := strings.Split(name, ".")
	if len(parts) < 2 {
		return false
	}
	if n.packages[parts[0]] {
		rest := strings.Join(parts[1:], ".")
		return n.idents[rest]
	}
	return false
}

func declared(t *testing.T, root string) names {
	t.Helper()
	n := names{idents: map[string]bool{}, packages: map[string]bool{}, strings: map[string]bool{}, files: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := d.Name(); path != root && (strings.HasPrefix(base, ".") || base == "testdata" || base == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		n.files[d.Name()] = true
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		n.packages[f.Name.Name] = true
		n.packages[filepath.Base(filepath.Dir(path))] = true
		for _, decl := range f.Decls {
			n.addDecl(decl)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (n names) addDecl(decl ast.Decl) {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		n.idents[d.Name.Name] = true
		if d.Recv != nil && len(d.Recv.List) == 1 {
			if recv := receiverType(d.Recv.List[0].Type); recv != "" {
				n.idents[recv+"."+d.Name.Name] = true
			}
		}
	case *ast.GenDecl:
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				n.idents[s.Name.Name] = true
				n.addMembers(s.Name.Name, s.Type)
			case *ast.ValueSpec:
				for i, name := range s.Names {
					n.idents[name.Name] = true
					if i < len(s.Values) {
						if lit, ok := s.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if v, err := strconv.Unquote(lit.Value); err == nil {
								n.strings[v] = true
							}
						}
					}
				}
			}
		}
	}
}

func (n names) addMembers(typeName string, expr ast.Expr) {
	var fields *ast.FieldList
	switch tt := expr.(type) {
	case *ast.StructType:
		fields = tt.Fields
	case *ast.InterfaceType:
		fields = tt.Methods
	default:
		return
	}
	for _, field := range fields.List {
		for _, name := range field.Names {
			n.idents[name.Name] = true
			n.idents[typeName+"."+name.Name] = true
		}
		if len(field.Names) == 0 { // embedded: its name is its type's
			if embedded := receiverType(field.Type); embedded != "" {
				n.idents[typeName+"."+embedded] = true
			}
		}
	}
}

func receiverType(expr ast.Expr) string {
	switch e := expr.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
