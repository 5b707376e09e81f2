package nn

import "testing"

// nopHook watches every module (it does not implement Watcher).
type nopHook struct{}

func (nopHook) Enter(Module) error             { return nil }
func (nopHook) Exit(_ Module, err error) error { return err }

// blockWatcher watches the blocks only.
type blockWatcher struct{ nopHook }

func (blockWatcher) Watches(m Module) bool { _, ok := m.(*block); return ok }

func TestUnwatched(t *testing.T) {
	root, blocks, _ := tree(t)
	tr := root.Node().Tree()
	a, b := blocks[0].A, blocks[0].B
	if !Unwatched(a, b) {
		t.Fatal("no hooks: the leaves are watched")
	}
	remove := tr.AddHook(blockWatcher{})
	if !Unwatched(a, b) || Unwatched(blocks[1]) || Unwatched(a, blocks[2]) {
		t.Fatal("a watcher of the blocks: leaves must be unwatched, blocks watched")
	}
	removeAll := tr.AddHook(nopHook{})
	if Unwatched(a) {
		t.Fatal("a hook without Watches must count as watching everything")
	}
	removeAll()
	remove()
	if !Unwatched(blocks[1]) {
		t.Fatal("hooks removed: still watched")
	}
}

// TestBindGeneration: every Bind moves the tree's bind generation.
func TestBindGeneration(t *testing.T) {
	root, blocks, _ := tree(t)
	tr := root.Node().Tree()
	g0 := tr.BindGeneration()
	w := blocks[2].B.W
	if err := w.Bind(w.Peek()); err != nil {
		t.Fatal(err)
	}
	if g1 := tr.BindGeneration(); g1 != g0+1 {
		t.Fatalf("generation %d after one Bind from %d", g1, g0)
	}
	if err := w.Bind(nil); err == nil {
		t.Fatal("bind to nil accepted")
	}
	if g2 := tr.BindGeneration(); g2 != g0+1 {
		t.Fatalf("a failed Bind moved the generation to %d", g2)
	}
}
