package nn

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

type leaf struct {
	Base
	W *Parameter
}

type block struct {
	Base
	A, B *leaf
}

// tree builds root ─ layers ─ {0,1,2} ─ {a, b}, each leaf with a weight.
func tree(t *testing.T) (*Container, []*block, *runtime.MetaDevice) {
	t.Helper()
	dev := runtime.NewMeta()
	root := &Container{}
	Init(root, "")
	layers := NewContainer(root, "layers")
	var blocks []*block
	for i := 0; i < 3; i++ {
		b := &block{}
		Attach(layers, fmt.Sprint(i), b)
		for _, name := range []string{"a", "b"} {
			l := &leaf{}
			Attach(b, name, l)
			w, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{2, 3}, "w")
			if err != nil {
				t.Fatal(err)
			}
			l.W = AddParam(l, "weight", w)
			if name == "a" {
				b.A = l
			} else {
				b.B = l
			}
		}
		blocks = append(blocks, b)
	}
	return root, blocks, dev
}

func TestNamesAndTraversal(t *testing.T) {
	root, blocks, _ := tree(t)
	if got := blocks[1].B.W.Name(); got != "layers.1.b.weight" {
		t.Fatalf("qualified name %q", got)
	}
	var names []string
	for _, m := range Modules(root) {
		names = append(names, m.Node().Name())
	}
	want := []string{"", "layers", "layers.0", "layers.0.a", "layers.0.b", "layers.1", "layers.1.a", "layers.1.b", "layers.2", "layers.2.a", "layers.2.b"}
	if !slices.Equal(names, want) {
		t.Fatalf("traversal %v", names)
	}
	// A shared parameter is listed once, under its owner.
	ShareParam(blocks[2].B, blocks[0].A.W)
	ps := Parameters(root)
	if len(ps) != 6 || ps[0] != blocks[0].A.W {
		t.Fatalf("%d parameters, first %s", len(ps), ps[0].Name())
	}
	if blocks[0].A.W.Owner() != Module(blocks[0].A) {
		t.Fatal("owner of a shared parameter changed")
	}
	if m, err := Find(root, "layers.2.a"); err != nil || m != Module(blocks[2].A) {
		t.Fatalf("Find = %v, %v", m, err)
	}
	if _, err := Find(root, "layers.9"); err == nil {
		t.Fatal("Find of a missing module succeeded")
	}
}

func TestMatchOutermost(t *testing.T) {
	root, _, _ := tree(t)
	cases := []struct {
		include, exclude []string
		want             []string
	}{
		{[]string{"layers.*"}, nil, []string{"layers.0", "layers.1", "layers.2"}},
		{[]string{"layers.*"}, []string{"layers.1"}, []string{"layers.0", "layers.2"}},
		{[]string{"layers.*.b"}, nil, []string{"layers.0.b", "layers.1.b", "layers.2.b"}},
		{[]string{"**.a", "layers.*"}, nil, []string{"layers.0", "layers.1", "layers.2"}}, // outermost wins
		{[]string{"layers.[02]"}, nil, []string{"layers.0", "layers.2"}},
		{[]string{"decoder.*"}, nil, nil},
	}
	for _, c := range cases {
		ms, err := MatchOutermost(root, c.include, c.exclude)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.Node().Name())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("include %v exclude %v: %v, want %v", c.include, c.exclude, got, c.want)
		}
	}
	if _, err := MatchOutermost(root, []string{"layers.[1"}, nil); err == nil || !strings.Contains(err.Error(), "layers.[1") {
		t.Errorf("bad pattern error = %v", err)
	}
}

type recorder struct {
	log  *[]string
	tag  string
	fail string
}

func (r recorder) Enter(m Module) error {
	*r.log = append(*r.log, r.tag+">"+m.Node().Name())
	if m.Node().Name() == r.fail {
		return errors.New("enter refused")
	}
	return nil
}

func (r recorder) Exit(m Module, err error) error {
	*r.log = append(*r.log, r.tag+"<"+m.Node().Name())
	return err
}

func TestHooksWrapEveryCall(t *testing.T) {
	root, blocks, _ := tree(t)
	var log []string
	remove1 := root.Node().Tree().AddHook(recorder{&log, "1", ""})
	root.Node().Tree().AddHook(recorder{&log, "2", "layers.2"})
	calls := 0
	err := Call(blocks[0], func() error {
		calls++
		return Call(blocks[0].A, func() error { calls++; return nil })
	})
	if err != nil || calls != 2 {
		t.Fatalf("Call: %v, %d calls", err, calls)
	}
	want := []string{"1>layers.0", "2>layers.0", "1>layers.0.a", "2>layers.0.a", "2<layers.0.a", "1<layers.0.a", "2<layers.0", "1<layers.0"}
	if !slices.Equal(log, want) {
		t.Fatalf("hook order %v", log)
	}
	// A refused entry skips the forward and unwinds the hooks entered.
	log = nil
	err = Call(blocks[2], func() error { t.Fatal("forward ran after a refused entry"); return nil })
	if err == nil || !slices.Equal(log, []string{"1>layers.2", "2>layers.2", "1<layers.2"}) {
		t.Fatalf("refused entry: %v, %v", err, log)
	}
	remove1()
	log = nil
	_ = Call(blocks[1], func() error { return nil })
	if !slices.Equal(log, []string{"2>layers.1", "2<layers.1"}) {
		t.Fatalf("after removing hook 1: %v", log)
	}
}

func TestParameterBindAndObserver(t *testing.T) {
	root, blocks, dev := tree(t)
	p := blocks[1].A.W
	other, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{3, 2}, "x")
	if err := p.Bind(other); err == nil || !strings.Contains(err.Error(), "layers.1.a.weight") {
		t.Fatalf("bind of another shape = %v", err)
	}
	same, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{2, 3}, "y")
	if err := p.Bind(same); err != nil || p.Peek() != same {
		t.Fatalf("bind: %v", err)
	}
	var seen []string
	root.Node().Tree().SetReadObserver(func(q *Parameter) { seen = append(seen, q.Name()) })
	_ = p.Tensor()
	_ = p.Peek() // not observed
	root.Node().Tree().SetReadObserver(nil)
	_ = p.Tensor()
	if !slices.Equal(seen, []string{"layers.1.a.weight"}) {
		t.Fatalf("observed %v", seen)
	}
}
