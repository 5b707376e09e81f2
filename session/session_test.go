package session_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime/cuda"
	"github.com/flextensor-go/flextensor/session"
)

type reference struct {
	GreedyPrompt       []int32 `json:"greedy_prompt"`
	GreedyContinuation []int32 `json:"greedy_continuation"`
}

func readReference(t *testing.T) reference {
	t.Helper()
	data, err := os.ReadFile("../testdata/tiny-llama/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// readmeBlock is the first ```go block after "## As a library" in README.md.
func readmeBlock(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "## As a library")
	if !ok {
		t.Fatal(`README.md has no "## As a library" section`)
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	if !ok {
		t.Fatal(`README.md's "As a library" section has no go block`)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md's go block is not closed")
	}
	return block
}

// TestREADMESnippet: the README's library snippet is readme_example_test.go
// from its import line on (so it compiles without the cuda tag), and it runs:
// on the cpu it gives the reference's greedy tokens and saves a profile that
// a second session loads; "cuda:0" fails with the built-without-CUDA error in
// a build without the tag.
func TestREADMESnippet(t *testing.T) {
	src, err := os.ReadFile("readme_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), "import (")
	if i < 0 {
		t.Fatal("readme_example_test.go has no import block")
	}
	if got, want := readmeBlock(t), string(src[i:]); got != want {
		t.Fatalf("README.md's \"As a library\" block differs from session/readme_example_test.go (from \"import (\" on); copy the file into the README.\nREADME:\n%s\nfile:\n%s", got, want)
	}

	ref := readReference(t)
	profile := t.TempDir()
	ids, err := generate("", "cpu", profile, ref.GreedyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 32 || !slices.Equal(ids[:len(ref.GreedyContinuation)], ref.GreedyContinuation) {
		t.Fatalf("generated %v; want 32 tokens starting %v", ids, ref.GreedyContinuation)
	}
	if _, err := os.Stat(profile + "/profile.json"); err != nil {
		t.Fatalf("no profile saved: %v", err)
	}
	s, err := session.Open("", "cpu", session.Options{ProfileDir: profile, Strict: true})
	if err != nil {
		t.Fatalf("opening from the saved profile: %v", err)
	}
	again, err := s.Model.Generate(s.Backend, ref.GreedyPrompt, llama.GenerateOptions{MaxNewTokens: 32, IgnoreEOS: true})
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil || !slices.Equal(again, ids) {
		t.Fatalf("from the profile: %v, %v; want %v", again, err, ids)
	}

	if _, err := generate("", "cuda:0", t.TempDir(), ref.GreedyPrompt); !isNotBuiltOrGPU(err) {
		t.Fatalf("cuda:0: %v", err)
	}
}

// isNotBuiltOrGPU: without the cuda tag opening a GPU fails with
// cuda.ErrNotBuilt; with it (make test-cuda) it may open one.
func isNotBuiltOrGPU(err error) bool {
	return errors.Is(err, cuda.ErrNotBuilt) || err == nil
}

func TestOpenResidentCPU(t *testing.T) {
	ref := readReference(t)
	s, err := session.Open("", "cpu", session.Options{DeviceMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if s.Manager != "" || s.Device.Name() != "cpu" || s.Checkpoint == nil || s.Dir == "" {
		t.Fatalf("session %+v: want a resident model on the cpu", s)
	}
	if _, err := os.Stat(s.Dir + "/config.json"); err != nil {
		t.Fatalf("bundled model not extracted: %v", err)
	}
	if used := s.Device.Memory().InUse; used == 0 {
		t.Fatal("the model's weights are not on the device")
	}
	ids, err := s.Model.Generate(s.Backend, ref.GreedyPrompt, llama.GenerateOptions{MaxNewTokens: len(ref.GreedyContinuation), IgnoreEOS: true})
	if err != nil || !slices.Equal(ids, ref.GreedyContinuation) {
		t.Fatalf("generated %v, %v; want %v", ids, err, ref.GreedyContinuation)
	}
	dir := s.Dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Close left the extracted model in %s (%v)", dir, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestOpenOffloaded: a fractional budget of the cpu device's limit offloads
// under a named manager; Close releases the manager.
func TestOpenOffloaded(t *testing.T) {
	ref := readReference(t)
	s, err := session.Open("", "cpu", session.Options{DeviceMemory: 2 << 20, GPUBudget: "0.5", Manager: "session-test", TransferBlocks: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s.Manager != "session-test" {
		t.Fatalf("manager %q", s.Manager)
	}
	ids, err := s.Model.Generate(s.Backend, ref.GreedyPrompt, llama.GenerateOptions{MaxNewTokens: len(ref.GreedyContinuation), IgnoreEOS: true})
	if err != nil || !slices.Equal(ids, ref.GreedyContinuation) {
		t.Fatalf("generated %v, %v; want %v", ids, err, ref.GreedyContinuation)
	}
	plan, err := offload.GetOffloadManager("session-test").Plan()
	if err != nil {
		t.Fatal(err)
	}
	if plan.Slots != 2 {
		t.Errorf("plan has %d transfer blocks, want 2", plan.Slots)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Released: the name may be used again.
	s2, err := session.Open("", "cpu", session.Options{DeviceMemory: 2 << 20, GPUBudget: "1MiB", Manager: "session-test"})
	if err != nil {
		t.Fatalf("reusing the manager name after Close: %v", err)
	}
	s2.Close()
}

func TestOpenErrors(t *testing.T) {
	cases := []struct {
		dir, device string
		opts        session.Options
		is          error
		want        string
	}{
		{"", "tpu", session.Options{}, session.ErrUnknownDevice, `"tpu"`},
		{"", "cuda:x", session.Options{}, session.ErrUnknownDevice, `"cuda:x"`},
		{"", "cpu", session.Options{GPUBudget: "lots"}, session.ErrBadOptions, `"lots"`},
		{"", "cpu", session.Options{TransferBlocks: -1}, session.ErrBadOptions, "-1"},
		{"", "cpu", session.Options{GPUBudget: "1MiB", ProfileDir: "x"}, session.ErrBadOptions, "exclude each other"},
		{"", "cpu", session.Options{Strict: true}, session.ErrBadOptions, "profile"},
		{"", "cpu", session.Options{DeviceMemory: -5}, session.ErrBadOptions, "negative"},
		{"", "cuda:0", session.Options{DeviceMemory: 1 << 20}, nil, "cpu device only"},
		{"/nonexistent/dir", "cpu", session.Options{}, nil, "/nonexistent/dir"},
		{"", "cpu", session.Options{ProfileDir: "/nonexistent/profile"}, nil, "/nonexistent/profile"},
	}
	for _, c := range cases {
		s, err := session.Open(c.dir, c.device, c.opts)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q, %q, %+v) succeeded", c.dir, c.device, c.opts)
			continue
		}
		if s != nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q, %q, %+v) = %v, %v; want an error wrapping %v mentioning %q", c.dir, c.device, c.opts, s, err, c.is, c.want)
		}
	}
}

func TestOpenDevice(t *testing.T) {
	dev, b, err := session.OpenDevice("cpu", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Name() != "cpu" || dev.Memory().Limit != 1<<20 || b.Device() != dev {
		t.Errorf("cpu: device %s limit %d, backend on %v", dev.Name(), dev.Memory().Limit, b.Device())
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cuda", "cuda:0", "cuda:3"} {
		isCUDA, _, err := session.ParseDevice(name)
		if !isCUDA || err != nil {
			t.Errorf("ParseDevice(%q) = %v, %v", name, isCUDA, err)
		}
	}
	if _, i, _ := session.ParseDevice("cuda:3"); i != 3 {
		t.Errorf("cuda:3 is index %d", i)
	}
	for _, name := range []string{"", "CPU", "cuda:", "cuda:-1", "gpu:0", "cuda0"} {
		if _, _, err := session.ParseDevice(name); !errors.Is(err, session.ErrUnknownDevice) {
			t.Errorf("ParseDevice(%q) = %v, want ErrUnknownDevice", name, err)
		}
	}
}

// TestProfileMissingTensorWarns: opening from a saved profile a checkpoint
// that lacks one of its tensors is an error naming it with Strict, and
// without Strict runs with the tensor as zeros and says so through Warn.
func TestProfileMissingTensorWarns(t *testing.T) {
	ref := readReference(t)
	profile := t.TempDir()
	if _, err := generate("", "cpu", profile, ref.GreedyPrompt); err != nil {
		t.Fatal(err)
	}
	ck, err := loader.OpenCheckpoint("../testdata/tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	const dropped = "model.layers.1.mlp.up_proj.weight"
	var keep []loader.NamedTensor
	for _, name := range ck.Names() {
		if name == dropped {
			continue
		}
		info, err := ck.Info(name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := ck.Bytes(name)
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, loader.NamedTensor{Name: name, DType: info.DType, Shape: info.Shape, Data: data})
	}
	dir := t.TempDir()
	if err := loader.WriteFile(dir+"/model.safetensors", keep, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "tokenizer.json"} {
		data, err := os.ReadFile("../testdata/tiny-llama/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/"+f, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := session.Open(dir, "cpu", session.Options{ProfileDir: profile, Strict: true}); !errors.Is(err, offload.ErrProfileMismatch) || !strings.Contains(err.Error(), dropped) {
		t.Fatalf("strict: %v, want offload.ErrProfileMismatch naming %s", err, dropped)
	}
	var warned []string
	s, err := session.Open(dir, "cpu", session.Options{ProfileDir: profile, Warn: func(m string) { warned = append(warned, m) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(warned) != 1 || !strings.Contains(warned[0], dropped) || !strings.Contains(warned[0], "zeros") {
		t.Fatalf("warnings %q, want one naming %s", warned, dropped)
	}
}

// TestGenerateBadArguments: Generate refuses a nil backend, bad sampling
// values and a closed session with errors naming what is wrong, never a
// panic or a message about memory.
func TestGenerateBadArguments(t *testing.T) {
	ref := readReference(t)
	s, err := session.Open("", "cpu", session.Options{DeviceMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	opt := func(p kernels.SampleParams) llama.GenerateOptions {
		return llama.GenerateOptions{MaxNewTokens: 2, Sampling: p}
	}
	nan := float32(math.NaN())
	for _, c := range []struct {
		name string
		b    kernels.Backend
		opt  llama.GenerateOptions
		want string
	}{
		{"nil backend", nil, opt(kernels.SampleParams{}), "nil backend"},
		{"temperature -1", s.Backend, opt(kernels.SampleParams{Temperature: -1}), "temperature -1"},
		{"temperature NaN", s.Backend, opt(kernels.SampleParams{Temperature: nan}), "temperature NaN"},
		{"temperature +Inf", s.Backend, opt(kernels.SampleParams{Temperature: float32(math.Inf(1))}), "temperature +Inf"},
		{"top-k -2", s.Backend, opt(kernels.SampleParams{Temperature: 1, TopK: -2}), "top-k -2"},
		{"top-p 1.5", s.Backend, opt(kernels.SampleParams{Temperature: 1, TopP: 1.5}), "top-p 1.5"},
	} {
		ids, err := s.Model.Generate(c.b, ref.GreedyPrompt, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Generate = %v, %v; want an error containing %q", c.name, ids, err, c.want)
		}
	}
	// The same session still generates after the refusals.
	if ids, err := s.Model.Generate(s.Backend, ref.GreedyPrompt, llama.GenerateOptions{MaxNewTokens: 2, IgnoreEOS: true}); err != nil || len(ids) != 2 {
		t.Fatalf("after the refusals: %v, %v", ids, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ids, err := s.Model.Generate(s.Backend, ref.GreedyPrompt, llama.GenerateOptions{MaxNewTokens: 2})
	if !errors.Is(err, decoder.ErrClosed) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Generate after Close = %v, %v; want decoder.ErrClosed", ids, err)
	}
}

// TestOffloadPreflight: a budget or transfer blocks that cannot fit the
// device's memory fail at Open, naming the numbers, not at the plan after
// the first forwards; and Manager.CheckDeviceFit fails once the caller
// took the room the budget needs (a KV cache).
func TestOffloadPreflight(t *testing.T) {
	for _, c := range []struct {
		name string
		opts session.Options
		is   error
		want []string
	}{
		{"a byte budget over the device", session.Options{DeviceMemory: 64 << 20, GPUBudget: "100GiB"}, nil,
			[]string{"budget 100.00 GiB exceeds the free memory of cpu", "64.00 MiB free of 64.00 MiB"}},
		{"the minimum for 100 transfer blocks over the device", session.Options{DeviceMemory: 1 << 20, GPUBudget: "0", TransferBlocks: 100}, nil,
			[]string{"minimum with 100 transfer block(s)", "exceeds the free memory of cpu", "1.00 MiB free"}},
		{"100 transfer blocks over the budget", session.Options{DeviceMemory: 2 << 20, GPUBudget: "1.5MiB", TransferBlocks: 100}, offload.ErrBudget,
			[]string{"budget 1.50 MiB is below the least any plan needs", "the whole model resident"}},
	} {
		s, err := session.Open("", "cpu", c.opts)
		if err == nil {
			s.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: %v; want %v", c.name, err, c.is)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", c.name, err, w)
			}
		}
	}
	s, err := session.Open("", "cpu", session.Options{DeviceMemory: 64 << 20, GPUBudget: "50MiB", Manager: "preflight-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := offload.GetOffloadManager("preflight-test")
	if err := m.CheckDeviceFit(); err != nil {
		t.Fatalf("before the caller's allocation: %v", err)
	}
	kv, err := s.Device.Alloc(16<<20, "a KV cache")
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Free()
	if err := m.CheckDeviceFit(); err == nil || !strings.Contains(err.Error(), "budget 50.00 MiB exceeds the free memory of cpu") {
		t.Errorf("a 50 MiB budget after 16 MiB of 64 taken: %v", err)
	}
}
