// Package nn is the module tree: modules with qualified names
// ("model.layers.3.mlp.down_proj"), re-bindable Parameters, traversal, and
// Call, the one path every module's forward passes through, where hooks (the
// offload engine's traps) enter and exit.
package nn

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/flextensor-go/flextensor/runtime"
)

// Module is a node of the module tree. A module embeds Base and passes itself
// to Init (a root) or Attach (a child).
type Module interface {
	// Node is the module's place in the tree (its embedded Base).
	Node() *Base
}

// Base holds a module's place in the tree: its qualified name, children and
// parameters. Embed it in every module.
type Base struct {
	self     Module
	name     string
	local    string
	children []Module
	params   []*Parameter
	tree     *Tree
}

// Node returns b; it makes any struct embedding Base a Module.
func (b *Base) Node() *Base { return b }

// Name is the qualified name ("model.layers.3.mlp"); the root's is "".
func (b *Base) Name() string { return b.name }

// LocalName is the last part of the name ("mlp").
func (b *Base) LocalName() string { return b.local }

// Children are the direct children in the order they were attached.
func (b *Base) Children() []Module { return b.children }

// Params are the parameters this module owns, in the order they were added.
func (b *Base) Params() []*Parameter { return b.params }

// Tree is the tree the module belongs to (nil before Init or Attach).
func (b *Base) Tree() *Tree { return b.tree }

// Init makes m the root of a new tree with the given name ("" for a model's root).
func Init(m Module, name string) *Tree {
	t := &Tree{root: m}
	b := m.Node()
	b.self, b.name, b.local, b.tree = m, name, name, t
	return t
}

// Attach makes child a child of parent under the local name; the child's
// qualified name is parent's name + "." + local. Building a module tree is
// code, not input, and its mistakes panic: a parent with no tree (not
// under an Init root), an empty local name, or one that parent already
// has a child under (two modules of one qualified name).
func Attach(parent Module, local string, child Module) {
	p, c := parent.Node(), child.Node()
	if p.tree == nil {
		panic("nn.Attach: parent has no tree; call nn.Init on the root first")
	}
	if local == "" {
		panic(fmt.Sprintf("nn.Attach: an empty local name under %q", p.name))
	}
	for _, sib := range p.children {
		if sib.Node().local == local {
			panic(fmt.Sprintf("nn.Attach: %q already has a child named %q", p.name, local))
		}
	}
	c.self, c.local, c.tree = child, local, p.tree
	c.name = local
	if p.name != "" {
		c.name = p.name + "." + local
	}
	p.children = append(p.children, child)
	// Re-name anything attached to the child before it was attached here.
	for _, gc := range c.children {
		c.reattach(gc)
	}
	for _, prm := range c.params {
		if prm.owner == c {
			prm.name = join(c.name, prm.local)
		}
	}
}

func (b *Base) reattach(child Module) {
	c := child.Node()
	c.tree = b.tree
	c.name = join(b.name, c.local)
	for _, gc := range c.children {
		c.reattach(gc)
	}
	for _, prm := range c.params {
		if prm.owner == c {
			prm.name = join(c.name, prm.local)
		}
	}
}

func join(prefix, local string) string {
	if prefix == "" {
		return local
	}
	return prefix + "." + local
}

// AddParam gives m a parameter under the local name, holding t (which may be
// nil until weights are bound). Its qualified name is m's name + "." + local.
func AddParam(m Module, local string, t *runtime.Tensor) *Parameter {
	b := m.Node()
	p := &Parameter{local: local, name: join(b.name, local), owner: b}
	p.t.Store(t)
	b.params = append(b.params, p)
	return p
}

// ShareParam makes m list a parameter another module owns (tied weights): a
// read of it through m is a read of the owner's tensor.
func ShareParam(m Module, p *Parameter) {
	b := m.Node()
	b.params = append(b.params, p)
}

// Parameter is a named reference to a tensor that can be re-bound to another
// buffer (a transfer slot, say) without the module knowing.
type Parameter struct {
	name  string
	local string
	owner *Base
	t     atomic.Pointer[runtime.Tensor]
	// declared is the shape the owning layer declared (Linear [out, in],
	// Embedding [vocab, dim], RMSNorm [dim]); nil: any.
	declared runtime.Shape
}

// Declared is the shape the owning layer declared for the parameter
// (Linear's weight [Out, In], bias [Out], FP8 scales as the layout says,
// Embedding's [Vocab, Dim], RMSNorm's [Dim]); nil when any shape goes (a
// parameter added with AddParam).
func (p *Parameter) Declared() runtime.Shape { return p.declared }

// Name is the qualified name ("model.layers.0.mlp.up_proj.weight").
func (p *Parameter) Name() string { return p.name }

// Owner is the module that declared the parameter.
func (p *Parameter) Owner() Module { return p.owner.self }

// Tensor is the tensor the parameter holds now. Reads go through the tree's
// read observer, if any (the offload engine's discovery).
func (p *Parameter) Tensor() *runtime.Tensor {
	if t := p.owner.tree; t != nil {
		if o := t.observer.Load(); o != nil {
			(*o)(p)
		}
	}
	return p.t.Load()
}

// Peek is the tensor without notifying the read observer.
func (p *Parameter) Peek() *runtime.Tensor { return p.t.Load() }

// Bind points the parameter at t. t must have the shape the layer declared
// (Declared), when it declared one; when the parameter already holds a
// tensor, t must have its dtype and shape.
func (p *Parameter) Bind(t *runtime.Tensor) error {
	if t == nil {
		return fmt.Errorf("parameter %s: bind to nil tensor", p.name)
	}
	if p.declared != nil && !t.Shape().Equal(p.declared) {
		return fmt.Errorf("parameter %s: bind %v %v: the layer declares shape %v", p.name, t.DType(), t.Shape(), p.declared)
	}
	if old := p.t.Load(); old != nil && (old.DType() != t.DType() || !old.Shape().Equal(t.Shape())) {
		return fmt.Errorf("parameter %s: bind %v %v over %v %v: dtype or shape differs",
			p.name, t.DType(), t.Shape(), old.DType(), old.Shape())
	}
	p.t.Store(t)
	if tr := p.owner.tree; tr != nil {
		tr.binds.Add(1) // BindGeneration: recorded work that read the old tensor is stale
	}
	return nil
}

// rebind points the parameter at t whatever its dtype and shape (for a
// module changing its own parameter's form: Linear.SetFP8).
func (p *Parameter) rebind(t *runtime.Tensor) {
	p.t.Store(t)
	if tr := p.owner.tree; tr != nil {
		tr.binds.Add(1)
	}
}

// Hook is called around every module forward that passes through Call.
type Hook interface {
	// Enter runs before m's forward; an error aborts the forward.
	Enter(m Module) error
	// Exit runs after m's forward (also when it failed, with its error) and
	// returns the error the caller sees.
	Exit(m Module, err error) error
}

// Tree is shared by every module of one model: its hooks and read observer.
type Tree struct {
	root     Module
	mu       sync.Mutex
	hooks    atomic.Pointer[[]Hook]
	observer atomic.Pointer[func(*Parameter)]
	binds    atomic.Uint64 // Parameter.Bind calls (BindGeneration)
}

// Root is the tree's root module.
func (t *Tree) Root() Module { return t.root }

// AddHook installs h (called after hooks already installed on enter, before
// them on exit) and returns a function that removes it.
func (t *Tree) AddHook(h Hook) (remove func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.hooks.Load()
	var hs []Hook
	if old != nil {
		hs = append(hs, *old...)
	}
	hs = append(hs, h)
	t.hooks.Store(&hs)
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		cur := t.hooks.Load()
		if cur == nil {
			return
		}
		var keep []Hook
		for _, x := range *cur {
			if x != h {
				keep = append(keep, x)
			}
		}
		t.hooks.Store(&keep)
	}
}

// SetReadObserver installs f to be called on every Parameter.Tensor read of
// this tree (nil removes it).
func (t *Tree) SetReadObserver(f func(*Parameter)) {
	if f == nil {
		t.observer.Store(nil)
		return
	}
	t.observer.Store(&f)
}

// ErrPanicked is what the exit hooks see (wrapped, with the panic's value)
// when a forward panicked; the panic itself goes on to Call's caller.
var ErrPanicked = errors.New("forward panicked")

// Call runs fn as m's forward with the tree's hooks around it. Every module's
// forward goes through here.
//
// Hooks are defer-safe: every hook whose Enter succeeded gets its Exit, in
// reverse order, also when fn (or a hook) panics. After a panic the exits see
// an error wrapping ErrPanicked, and the panic then propagates to the caller
// unchanged, so a caller that recovers sees it. The hooks of one Call are
// those installed when it began: a hook removed during a forward still exits
// the calls it entered. A nil m or fn is an error.
func Call(m Module, fn func() error) error {
	if m == nil || fn == nil {
		return errors.New("nn.Call: a module and a forward function are needed (got a nil one)")
	}
	t := m.Node().tree
	if t == nil {
		return fn()
	}
	hp := t.hooks.Load()
	if hp == nil || len(*hp) == 0 {
		return fn()
	}
	hooks := *hp
	entered := 0
	finished := false
	defer func() {
		if finished {
			return
		}
		// r is nil only when the goroutine is exiting (runtime.Goexit, as
		// t.Fatal in a forward does): the exits run and the exit goes on.
		r := recover()
		perr := fmt.Errorf("module %q: %w: %v", m.Node().name, ErrPanicked, r)
		if r == nil {
			perr = fmt.Errorf("module %q: %w: the goroutine exited during the forward", m.Node().name, ErrPanicked)
		}
		func() {
			// A hook that panics again while the first panic unwinds loses to
			// the first one; the remaining exits still run.
			defer func() { _ = recover() }()
			exitHooks(hooks[:entered], m, perr)
		}()
		if r != nil {
			panic(r)
		}
	}()
	var err error
	for _, h := range hooks {
		if err = h.Enter(m); err != nil {
			break
		}
		entered++
	}
	if err == nil {
		err = fn()
	}
	finished = true
	return exitHooks(hooks[:entered], m, err)
}

// exitHooks runs the hooks' exits last to first, threading the error. When
// one panics, the ones before it still exit (seeing ErrPanicked) and the
// panic propagates.
func exitHooks(hooks []Hook, m Module, err error) error {
	if len(hooks) == 0 {
		return err
	}
	rest := hooks[:len(hooks)-1]
	exited := false
	defer func() {
		if exited {
			return
		}
		r := recover() // nil when the goroutine is exiting (see Call)
		perr := fmt.Errorf("module %q: exit hook: %w: %v", m.Node().name, ErrPanicked, r)
		func() {
			defer func() { _ = recover() }()
			exitHooks(rest, m, perr)
		}()
		if r != nil {
			panic(r)
		}
	}()
	err = hooks[len(hooks)-1].Exit(m, err)
	exited = true
	return exitHooks(rest, m, err)
}

// Modules lists root and every module under it, depth first in attach order.
func Modules(root Module) []Module {
	var out []Module
	var walk func(Module)
	walk = func(m Module) {
		out = append(out, m)
		for _, c := range m.Node().children {
			walk(c)
		}
	}
	walk(root)
	return out
}

// Parameters lists every parameter under root once (a shared parameter is
// listed where its owner is), in traversal order.
func Parameters(root Module) []*Parameter {
	var out []*Parameter
	seen := map[*Parameter]bool{}
	for _, m := range Modules(root) {
		for _, p := range m.Node().params {
			if !seen[p] && p.owner == m.Node() {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	// Shared parameters whose owner is outside root's subtree.
	for _, m := range Modules(root) {
		for _, p := range m.Node().params {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// Find returns the module with the qualified name under root.
func Find(root Module, name string) (Module, error) {
	for _, m := range Modules(root) {
		if m.Node().name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no module named %q", name)
}

// MatchOutermost returns the outermost modules whose qualified names match any
// include glob and no exclude glob, in traversal order. Globs follow
// path.Match over dot-separated names: "*" matches within one name part, so
// "model.layers.*" matches "model.layers.3" but not "model.layers.3.mlp".
func MatchOutermost(root Module, include, exclude []string) ([]Module, error) {
	for _, g := range append(append([]string(nil), include...), exclude...) {
		for _, part := range strings.Split(g, ".") {
			if part == "**" {
				continue
			}
			if err := validPart(part); err != nil {
				return nil, fmt.Errorf("bad module pattern %q: %w", g, err)
			}
		}
	}
	var out []Module
	var walk func(Module)
	walk = func(m Module) {
		n := m.Node().name
		if n != "" && matchAny(include, n) && !matchAny(exclude, n) {
			out = append(out, m)
			return
		}
		for _, c := range m.Node().children {
			walk(c)
		}
	}
	walk(root)
	return out, nil
}

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := matchGlob(g, name); ok {
			return ok
		}
	}
	return false
}

// matchGlob matches dot-separated parts with path.Match semantics per part;
// "**" matches any number of parts.
func matchGlob(glob, name string) (bool, error) {
	gp := strings.Split(glob, ".")
	np := strings.Split(name, ".")
	if name == "" {
		np = nil
	}
	return matchParts(gp, np)
}

func matchParts(gp, np []string) (bool, error) {
	if len(gp) == 0 {
		return len(np) == 0, nil
	}
	if gp[0] == "**" {
		for i := 0; i <= len(np); i++ {
			if ok, err := matchParts(gp[1:], np[i:]); ok || err != nil {
				return ok, err
			}
		}
		return false, nil
	}
	if err := validPart(gp[0]); err != nil {
		return false, err
	}
	if len(np) == 0 {
		return false, nil
	}
	ok, err := pathMatch(gp[0], np[0])
	if !ok || err != nil {
		return false, err
	}
	return matchParts(gp[1:], np[1:])
}

var errBadPattern = errors.New("syntax error in pattern")

func validPart(p string) error {
	_, err := pathMatch(p, "")
	return err
}
