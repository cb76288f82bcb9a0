// Command apilist prints the exported API of the module's public packages, one feature a line and
// sorted, for api/timeoutmill.txt: the readable side of the baseline, where a review sees what a
// change adds to or takes from the public face. The check itself is apidiff's (scripts/apicheck.sh).
//
//	go run ./api/internal/apilist > api/timeoutmill.txt
//
// It reads the compiler's export data through `go list -export`, so it needs nothing beyond the
// standard library and a tree that builds.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// excluded are the module-relative paths outside the promise (as in scripts/apicheck.sh).
var excluded = regexp.MustCompile(`^(cmd|examples|acceptance)(/|$)|(^|/)internal(/|$)`)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	module, err := goList("list", "-m")
	if err != nil {
		return err
	}
	module = strings.TrimSpace(module)
	out, err := goList("list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{.Name}}\t{{.Module}}", "./...")
	if err != nil {
		return err
	}
	exports := map[string]string{}
	var public []string
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimSpace(line), "\t")
		if len(f) != 4 {
			continue
		}
		path, export, name, mod := f[0], f[1], f[2], f[3]
		exports[path] = export
		rel, ok := strings.CutPrefix(path, module+"/")
		if mod != module || !ok || name == "main" || excluded.MatchString(rel) {
			continue
		}
		public = append(public, path)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	}).(types.ImporterFrom)
	var lines []string
	for _, path := range public {
		pkg, err := imp.ImportFrom(path, "", 0)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		lines = append(lines, features(pkg, strings.TrimPrefix(path, module+"/"))...)
	}
	slices.Sort(lines)
	bw := bufio.NewWriter(w)
	for _, l := range slices.Compact(lines) {
		fmt.Fprintln(bw, l)
	}
	return bw.Flush()
}

func goList(args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// features lists one package's exported names: constants, variables, functions, types, and for
// each type its exported fields and the exported methods of its pointer's method set (promoted
// ones included) or of its interface.
func features(pkg *types.Package, rel string) []string {
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	str := func(t types.Type) string { return types.TypeString(t, qual) }
	prefix := "pkg " + rel + ", "
	var out []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			out = append(out, fmt.Sprintf("%sconst %s %s = %s", prefix, name, str(obj.Type()), obj.Val().ExactString()))
		case *types.Var:
			out = append(out, fmt.Sprintf("%svar %s %s", prefix, name, str(obj.Type())))
		case *types.Func:
			out = append(out, fmt.Sprintf("%sfunc %s%s", prefix, name, signature(obj.Type().(*types.Signature), str)))
		case *types.TypeName:
			out = append(out, typeFeatures(prefix, obj, str)...)
		}
	}
	return out
}

func typeFeatures(prefix string, obj *types.TypeName, str func(types.Type) string) []string {
	name := obj.Name()
	if obj.IsAlias() {
		return []string{fmt.Sprintf("%stype %s = %s", prefix, name, str(types.Unalias(obj.Type())))}
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		return []string{fmt.Sprintf("%stype %s %s", prefix, name, str(obj.Type()))}
	}
	var out []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		out = append(out, fmt.Sprintf("%stype %s struct", prefix, name))
		for f := range u.Fields() {
			if f.Exported() {
				out = append(out, fmt.Sprintf("%stype %s struct, %s %s", prefix, name, f.Name(), str(f.Type())))
			}
		}
	case *types.Interface:
		out = append(out, fmt.Sprintf("%stype %s interface", prefix, name))
		for i := range u.NumMethods() {
			m := u.Method(i)
			if m.Exported() {
				out = append(out, fmt.Sprintf("%stype %s interface, %s%s", prefix, name, m.Name(), signature(m.Type().(*types.Signature), str)))
			}
		}
		return out
	default:
		out = append(out, fmt.Sprintf("%stype %s %s", prefix, name, str(u)))
	}
	mset := types.NewMethodSet(types.NewPointer(named))
	for sel := range mset.Methods() {
		m := sel.Obj()
		if !m.Exported() {
			continue
		}
		recv := "*" + name
		if isValueMethod(m) {
			recv = name
		}
		out = append(out, fmt.Sprintf("%smethod (%s) %s%s", prefix, recv, m.Name(), signature(sel.Type().(*types.Signature), str)))
	}
	return out
}

// signature formats a function's parameters and results by their types alone, so that renaming
// a parameter changes no line.
func signature(sig *types.Signature, str func(types.Type) string) string {
	list := func(t *types.Tuple, variadic bool) []string {
		var parts []string
		for i := range t.Len() {
			typ := t.At(i).Type()
			if variadic && i == t.Len()-1 {
				parts = append(parts, "..."+str(typ.(*types.Slice).Elem()))
				continue
			}
			parts = append(parts, str(typ))
		}
		return parts
	}
	s := "(" + strings.Join(list(sig.Params(), sig.Variadic()), ", ") + ")"
	switch res := list(sig.Results(), false); len(res) {
	case 0:
	case 1:
		s += " " + res[0]
	default:
		s += " (" + strings.Join(res, ", ") + ")"
	}
	return s
}

// isValueMethod reports whether m is declared on a value receiver.
func isValueMethod(m types.Object) bool {
	sig := m.Type().(*types.Signature)
	_, ptr := sig.Recv().Type().(*types.Pointer)
	return !ptr
}
