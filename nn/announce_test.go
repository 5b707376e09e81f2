package nn

import "testing"

type announceRecorder struct {
	got [][]string
}

func (r *announceRecorder) Enter(Module) error             { return nil }
func (r *announceRecorder) Exit(_ Module, err error) error { return err }
func (r *announceRecorder) Announce(parent Module, next []Module) {
	var names []string
	for _, m := range next {
		names = append(names, m.Node().Name())
	}
	r.got = append(r.got, append([]string{parent.Node().Name()}, names...))
}

func TestAnnounceReachesAnnouncers(t *testing.T) {
	root := &Container{}
	Init(root, "")
	moe := NewContainer(root, "moe")
	a := NewContainer(moe, "a")
	b := NewContainer(moe, "b")

	Announce(moe, b, a) // no hook: nothing to do, no panic

	rec := &announceRecorder{}
	remove := root.Tree().AddHook(rec)
	Announce(moe, b, a)
	Announce(moe) // nothing announced: not delivered
	remove()
	Announce(moe, a)

	if len(rec.got) != 1 {
		t.Fatalf("announcements = %v, want exactly one", rec.got)
	}
	want := []string{"moe", "moe.b", "moe.a"}
	for i, w := range want {
		if rec.got[0][i] != w {
			t.Fatalf("announcement = %v, want %v", rec.got[0], want)
		}
	}
}
