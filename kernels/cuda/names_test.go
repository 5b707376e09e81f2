package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// kernelLookup is one kernel name the CUDA backend asks a module for, as
// its Go source spells it: the exact name, or the pattern of a name built
// from a literal prefix or suffix (get("gemv3_fp8_" + v.Name)) or a
// fmt.Sprintf format.
type kernelLookup struct {
	at      string         // file:line
	main    bool           // get(...): the main module (Source); else any unit
	name    string         // exact, or "" when pattern is set
	pattern *regexp.Regexp // the names it may build
}

// backendLookups reads the CUDA backend's Go files (kernels/cudabackend,
// tests left out) for the kernel names they look up: calls of a function
// named get (kernelsFor's lookup in the main module, handed to the
// loaders) and of a method Function (a module's lookup) whose argument is
// a string literal, a + chain that starts or ends with one, or
// fmt.Sprintf of a literal format. It also returns how many lookups it
// could not read (names from lists or variables).
func backendLookups(t *testing.T) (found []kernelLookup, dynamic int) {
	t.Helper()
	files, err := filepath.Glob("../cudabackend/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in ../cudabackend (%v)", err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}
			main := false
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				if fn.Name != "get" {
					return true
				}
				main = true
			case *ast.SelectorExpr:
				if fn.Sel.Name != "Function" {
					return true
				}
			default:
				return true
			}
			pos := fset.Position(call.Pos())
			l := kernelLookup{at: filepath.Base(pos.Filename) + ":" + strconv.Itoa(pos.Line), main: main}
			if name, ok := stringLit(call.Args[0]); ok {
				l.name = name
			} else if re := lookupPattern(call.Args[0]); re != nil {
				l.pattern = re
			} else {
				dynamic++
				return true
			}
			found = append(found, l)
			return true
		})
	}
	return found, dynamic
}

// stringLit is e's value when e is a string literal.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// lookupPattern is the pattern of the names e builds: a + chain with a
// literal first or last operand (the rest any identifier characters), or
// fmt.Sprintf of a literal format (%d digits, %s and %v identifier
// characters); nil for anything else.
func lookupPattern(e ast.Expr) *regexp.Regexp {
	switch e := e.(type) {
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return nil
		}
		var parts []ast.Expr
		var flatten func(ast.Expr)
		flatten = func(x ast.Expr) {
			if b, ok := x.(*ast.BinaryExpr); ok && b.Op == token.ADD {
				flatten(b.X)
				flatten(b.Y)
				return
			}
			parts = append(parts, x)
		}
		flatten(e)
		var re strings.Builder
		lits := 0
		for _, p := range parts {
			if s, ok := stringLit(p); ok {
				re.WriteString(regexp.QuoteMeta(s))
				lits++
			} else {
				re.WriteString(`\w*`)
			}
		}
		if lits == 0 {
			return nil
		}
		return regexp.MustCompile("^" + re.String() + "$")
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Sprintf" || len(e.Args) == 0 {
			return nil
		}
		format, ok := stringLit(e.Args[0])
		if !ok {
			return nil
		}
		re := regexp.QuoteMeta(format)
		re = strings.NewReplacer("%d", `\d+`, "%s", `\w*`, "%v", `\w*`).Replace(re)
		return regexp.MustCompile("^" + re + "$")
	}
	return nil
}

// TestBackendKernelNames: every kernel name the CUDA backend looks up by a
// literal (or a literal pattern) is a kernel of the units as clang
// compiles them, in the main module where kernelsFor's get asks for it.
// A kernel renamed or removed in a .cu file while the Go side still asks
// for it fails here, on a machine without a GPU, instead of stopping the
// backend at start-up on the GPU machine ("named symbol not found").
// Skips without clang (.ci/run installs clang-14).
func TestBackendKernelNames(t *testing.T) {
	c := newClangCheck(t)
	byUnit := map[string][]string{}
	var all []string
	for name, src := range kernelUnits(t) {
		ks := kernelsInIR(c.unitIR(t, name, src, unitFlags(name)...))
		byUnit[name] = ks
		all = append(all, ks...)
	}
	if len(byUnit["main"]) == 0 {
		t.Fatal("no kernel found in the main unit's IR: the IR reading is broken")
	}
	lookups, dynamic := backendLookups(t)
	if len(lookups) < 80 {
		t.Fatalf("read only %d kernel lookups from ../cudabackend: the Go reading is broken", len(lookups))
	}
	for _, l := range lookups {
		in := all
		where := "any kernel unit"
		if l.main {
			in, where = byUnit["main"], "the main unit (Source)"
		}
		if l.name != "" {
			if !slices.Contains(in, l.name) {
				t.Errorf("%s looks up kernel %q, which %s does not define", l.at, l.name, where)
			}
			continue
		}
		if !slices.ContainsFunc(in, l.pattern.MatchString) {
			t.Errorf("%s builds kernel names matching %s, and %s defines none", l.at, l.pattern, where)
		}
	}
	t.Logf("%d lookups checked (%d kernels in %d units), %d built from lists or variables not checked", len(lookups), len(all), len(byUnit), dynamic)
}

// TestBackendKernelNamesCatches: the Go reading finds a literal, a prefix
// chain and a Sprintf format, and a name no unit defines is reported.
func TestBackendKernelNamesCatches(t *testing.T) {
	cases := []struct {
		src   string
		match string
		miss  string
	}{
		{`get("gemv_bf16")`, "gemv_bf16", "gemv_bf16x"},
		{`get("gemv3_fp8_" + v.Name)`, "gemv3_fp8_u4r1s", "gemv3_bf16"},
		{`get("gemv3_" + d + "_bf16")`, "gemv3_pipe_bf16", "gemv3_pipe_f32"},
		{`fmt.Sprintf("rows_j%d", j)`, "rows_j2", "rows_jx"},
	}
	for _, c := range cases {
		e, err := parser.ParseExpr(c.src)
		if err != nil {
			t.Fatal(err)
		}
		arg := e
		if call, ok := e.(*ast.CallExpr); ok {
			if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "get" {
				arg = call.Args[0]
			}
		}
		if s, ok := stringLit(arg); ok {
			if s != c.match {
				t.Errorf("%s: read %q, want %q", c.src, s, c.match)
			}
			continue
		}
		re := lookupPattern(arg)
		if re == nil {
			t.Errorf("%s: no pattern read", c.src)
			continue
		}
		if !re.MatchString(c.match) || re.MatchString(c.miss) {
			t.Errorf("%s: pattern %s should match %q and not %q", c.src, re, c.match, c.miss)
		}
	}
	if lookupPattern(&ast.Ident{Name: "name"}) != nil {
		t.Error("a bare variable gave a pattern")
	}
}
