package nn

import (
	"errors"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
)

// traceHook logs its enters and exits (with whether the exit saw an error,
// and whether that error was a panic) and can refuse, fail or panic on a
// named module.
type traceHook struct {
	tag        string
	log        *[]string
	refuse     string // Enter returns an error here
	panicEnter string // Enter panics here
	panicExit  string // Exit panics here
	failExit   string // Exit returns an error here
	onEnter    func(m Module)
}

func (h *traceHook) Enter(m Module) error {
	n := m.Node().Name()
	*h.log = append(*h.log, h.tag+">"+n)
	if h.onEnter != nil {
		h.onEnter(m)
	}
	if n == h.panicEnter {
		panic("enter " + h.tag)
	}
	if n == h.refuse {
		return errors.New("refused by " + h.tag)
	}
	return nil
}

func (h *traceHook) Exit(m Module, err error) error {
	n := m.Node().Name()
	mark := ""
	switch {
	case errors.Is(err, ErrPanicked):
		mark = "!"
	case err != nil:
		mark = "x"
	}
	*h.log = append(*h.log, h.tag+"<"+n+mark)
	if n == h.panicExit {
		panic("exit " + h.tag)
	}
	if n == h.failExit {
		return errors.Join(err, errors.New("exit failed in "+h.tag))
	}
	return err
}

// callOutcome runs Call and reports its error and any panic that escaped.
func callOutcome(m Module, fn func() error) (err error, panicked any) {
	defer func() { panicked = recover() }()
	return Call(m, fn), nil
}

func TestCallTable(t *testing.T) {
	forwardErr := errors.New("forward failed")
	cases := []struct {
		name string
		// hooks one and two, configured per case
		h1, h2 traceHook
		// fwd runs as layers.0's forward, given layers.0.a to call into
		fwd       func(inner Module) error
		wantLog   []string
		wantErr   string // substring; "" for no error
		wantPanic any
	}{
		{
			name:    "nested calls",
			fwd:     func(a Module) error { return Call(a, func() error { return nil }) },
			wantLog: []string{"1>layers.0", "2>layers.0", "1>layers.0.a", "2>layers.0.a", "2<layers.0.a", "1<layers.0.a", "2<layers.0", "1<layers.0"},
		},
		{
			name:    "forward error reaches every exit",
			fwd:     func(a Module) error { return Call(a, func() error { return forwardErr }) },
			wantLog: []string{"1>layers.0", "2>layers.0", "1>layers.0.a", "2>layers.0.a", "2<layers.0.ax", "1<layers.0.ax", "2<layers.0x", "1<layers.0x"},
			wantErr: "forward failed",
		},
		{
			name:    "refused entry skips the forward, unwinds the entered",
			h2:      traceHook{refuse: "layers.0.a"},
			fwd:     func(a Module) error { return Call(a, func() error { panic("must not run") }) },
			wantLog: []string{"1>layers.0", "2>layers.0", "1>layers.0.a", "2>layers.0.a", "1<layers.0.ax", "2<layers.0x", "1<layers.0x"},
			wantErr: "refused by 2",
		},
		{
			name:    "exit error joins the forward's",
			h1:      traceHook{failExit: "layers.0"},
			fwd:     func(a Module) error { return forwardErr },
			wantLog: []string{"1>layers.0", "2>layers.0", "2<layers.0x", "1<layers.0x"},
			wantErr: "exit failed in 1",
		},
		{
			name: "panic in the inner forward exits every level and propagates",
			fwd: func(a Module) error {
				return Call(a, func() error { panic("boom") })
			},
			wantLog:   []string{"1>layers.0", "2>layers.0", "1>layers.0.a", "2>layers.0.a", "2<layers.0.a!", "1<layers.0.a!", "2<layers.0!", "1<layers.0!"},
			wantPanic: "boom",
		},
		{
			name:      "panic in an enter hook exits only the hooks entered",
			h2:        traceHook{panicEnter: "layers.0.a"},
			fwd:       func(a Module) error { return Call(a, func() error { panic("must not run") }) },
			wantLog:   []string{"1>layers.0", "2>layers.0", "1>layers.0.a", "2>layers.0.a", "1<layers.0.a!", "2<layers.0!", "1<layers.0!"},
			wantPanic: "enter 2",
		},
		{
			name:      "panic in an exit hook still runs the earlier hooks' exits",
			h2:        traceHook{panicExit: "layers.0.a"},
			fwd:       func(a Module) error { return Call(a, func() error { return nil }) },
			wantLog:   []string{"1>layers.0", "2>layers.0", "1>layers.0.a", "2>layers.0.a", "2<layers.0.a", "1<layers.0.a!", "2<layers.0!", "1<layers.0!"},
			wantPanic: "exit 2",
		},
		{
			name:      "a second panic while unwinding loses to the first",
			h1:        traceHook{panicExit: "layers.0.a"},
			fwd:       func(a Module) error { return Call(a, func() error { panic("first") }) },
			wantLog:   []string{"1>layers.0", "2>layers.0", "1>layers.0.a", "2>layers.0.a", "2<layers.0.a!", "1<layers.0.a!", "2<layers.0!", "1<layers.0!"},
			wantPanic: "first",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, blocks, _ := tree(t)
			var log []string
			h1, h2 := c.h1, c.h2
			h1.tag, h1.log = "1", &log
			h2.tag, h2.log = "2", &log
			tr := root.Node().Tree()
			tr.AddHook(&h1)
			tr.AddHook(&h2)
			err, p := callOutcome(blocks[0], func() error { return c.fwd(blocks[0].A) })
			if !slices.Equal(log, c.wantLog) {
				t.Errorf("log\n got %v\nwant %v", log, c.wantLog)
			}
			if p != c.wantPanic {
				t.Errorf("panic %v, want %v", p, c.wantPanic)
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("error %v, want one containing %q", err, c.wantErr)
			}
			// The tree is usable afterwards: a plain call enters and exits once.
			log = nil
			if err, p := callOutcome(blocks[1], func() error { return nil }); err != nil || p != nil {
				t.Fatalf("next call: %v, %v", err, p)
			}
			if want := []string{"1>layers.1", "2>layers.1", "2<layers.1", "1<layers.1"}; !slices.Equal(log, want) {
				t.Errorf("next call log %v, want %v", log, want)
			}
		})
	}
}

func TestCallHookRemovedMidPass(t *testing.T) {
	root, blocks, _ := tree(t)
	tr := root.Node().Tree()
	var log []string
	var remove2 func()
	h1 := &traceHook{tag: "1", log: &log}
	h2 := &traceHook{tag: "2", log: &log, onEnter: func(m Module) {
		if m.Node().Name() == "layers.0" {
			remove2() // removed on entry of the outer call
		}
	}}
	tr.AddHook(h1)
	remove2 = tr.AddHook(h2)
	err := Call(blocks[0], func() error { return Call(blocks[0].A, func() error { return nil }) })
	if err != nil {
		t.Fatal(err)
	}
	// The outer call still exits the removed hook; the inner call, begun
	// after the removal, never sees it.
	want := []string{"1>layers.0", "2>layers.0", "1>layers.0.a", "1<layers.0.a", "2<layers.0", "1<layers.0"}
	if !slices.Equal(log, want) {
		t.Fatalf("log\n got %v\nwant %v", log, want)
	}
	// A hook added mid-pass sees only calls that begin after it.
	log = nil
	h3 := &traceHook{tag: "3", log: &log}
	err = Call(blocks[1], func() error {
		tr.AddHook(h3)
		return Call(blocks[1].B, func() error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"1>layers.1", "1>layers.1.b", "3>layers.1.b", "3<layers.1.b", "1<layers.1.b", "1<layers.1"}
	if !slices.Equal(log, want) {
		t.Fatalf("log\n got %v\nwant %v", log, want)
	}
}

func TestCallPanicWithoutHooks(t *testing.T) {
	_, blocks, _ := tree(t)
	_, p := callOutcome(blocks[0], func() error { panic("plain") })
	if p != "plain" {
		t.Fatalf("panic %v", p)
	}
}

// TestCallGoexit: a forward that ends its goroutine (runtime.Goexit, as
// t.Fatal does) still exits every hook entered, and the goroutine exits
// rather than panicking.
func TestCallGoexit(t *testing.T) {
	root, blocks, _ := tree(t)
	var log []string
	root.Node().Tree().AddHook(&traceHook{tag: "1", log: &log})
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		_ = Call(blocks[0], func() error {
			return Call(blocks[0].A, func() error { goruntime.Goexit(); return nil })
		})
	}()
	if p := <-done; p != nil {
		t.Fatalf("Goexit became a panic: %v", p)
	}
	want := []string{"1>layers.0", "1>layers.0.a", "1<layers.0.a!", "1<layers.0!"}
	if !slices.Equal(log, want) {
		t.Fatalf("log %v, want %v", log, want)
	}
}
