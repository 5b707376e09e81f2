package loader

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// randomTensors makes tensors of mixed dtypes with random contents.
func randomTensors(seed uint64) []NamedTensor {
	rng := rand.New(rand.NewPCG(seed, 1))
	mk := func(name string, dt runtime.DType, shape ...int) NamedTensor {
		n := dt.Size()
		for _, d := range shape {
			n *= d
		}
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		return NamedTensor{Name: name, DType: dt, Shape: shape, Data: data}
	}
	return []NamedTensor{
		mk("model.embed_tokens.weight", runtime.BF16, 64, 16),
		mk("model.layers.0.input_layernorm.weight", runtime.F32, 16),
		mk("model.layers.0.mlp.up_proj.weight", runtime.F16, 40, 16),
		mk("model.layers.0.self_attn.q_proj.weight", runtime.BF16, 16, 16),
		mk("model.layers.1.input_layernorm.weight", runtime.F32, 16),
		mk("token_ids", runtime.I64, 3),
		mk("mask", runtime.U8, 5),
		mk("counts", runtime.I32, 2, 1),
		mk("scalar", runtime.F32),
		mk("empty", runtime.BF16, 0, 4),
		mk("model.norm.weight", runtime.BF16, 16),
	}
}

// checkContents asserts c holds exactly tensors, byte for byte.
func checkContents(t *testing.T, c *Checkpoint, tensors []NamedTensor) {
	t.Helper()
	var want []string
	var total int64
	for _, nt := range tensors {
		want = append(want, nt.Name)
		total += int64(len(nt.Data))
	}
	slices.Sort(want)
	if got := c.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	if c.TotalBytes() != total {
		t.Errorf("TotalBytes = %d, want %d", c.TotalBytes(), total)
	}
	for _, nt := range tensors {
		info, err := c.Info(nt.Name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType != nt.DType || !slices.Equal(info.Shape, nt.Shape) {
			t.Errorf("%s: Info = %v %v, want %v %v", nt.Name, info.DType, info.Shape, nt.DType, nt.Shape)
		}
		if info.Offset%int64(nt.DType.Size()) != 0 {
			t.Errorf("%s: offset %d not aligned to %d", nt.Name, info.Offset, nt.DType.Size())
		}
		view, err := c.Bytes(nt.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(view, nt.Data) {
			t.Errorf("%s: Bytes differ from what was written", nt.Name)
		}
		got := make([]byte, len(nt.Data))
		if err := c.ReadInto(nt.Name, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, nt.Data) {
			t.Errorf("%s: ReadInto differs from what was written", nt.Name)
		}
	}
}

func TestCheckpointTinyLlama(t *testing.T) {
	c, err := OpenCheckpoint(tinyLlama)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	names := c.Names()
	if len(names) != 39 {
		t.Fatalf("got %d tensors, want 39 (4 layers x 9 + embed, norm, lm_head)", len(names))
	}
	for _, tc := range []struct {
		name  string
		shape []int
	}{
		{"model.embed_tokens.weight", []int{512, 128}},
		{"lm_head.weight", []int{512, 128}},
		{"model.norm.weight", []int{128}},
		{"model.layers.3.self_attn.k_proj.weight", []int{64, 128}},
		{"model.layers.2.mlp.gate_proj.weight", []int{352, 128}},
	} {
		info, err := c.Info(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType != runtime.BF16 || !slices.Equal(info.Shape, tc.shape) {
			t.Errorf("%s: %v %v, want BF16 %v", tc.name, info.DType, info.Shape, tc.shape)
		}
	}
	if c.TotalBytes() != 1739008 {
		t.Errorf("TotalBytes = %d, want 1739008 (the data section)", c.TotalBytes())
	}
	if got := c.Files(); len(got) != 1 || filepath.Base(got[0]) != "model.safetensors" {
		t.Errorf("Files = %v", got)
	}
}

func TestRoundTripWriteFile(t *testing.T) {
	tensors := randomTensors(1)
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, SingleFileName), tensors, map[string]string{"format": "pt", "note": `a "quoted" value`}); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkContents(t, c, tensors)
	f, err := OpenFile(filepath.Join(dir, SingleFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if m := f.Metadata(); m["note"] != `a "quoted" value` || m["format"] != "pt" || len(m) != 2 {
		t.Errorf("Metadata = %v", m)
	}
}

func TestRoundTripWriteSharded(t *testing.T) {
	tensors := randomTensors(2)
	dir := filepath.Join(t.TempDir(), "new", "ckpt") // created by WriteSharded
	if err := WriteSharded(dir, tensors, 1500); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkContents(t, c, tensors)

	// Sizes in order: embed 2048 (over the limit: alone), ln0 64 + up 1280
	// (adding q's 512 would pass 1500), then q and the small rest (649).
	wantShard := map[string]int{"model.embed_tokens.weight": 1, "model.layers.0.input_layernorm.weight": 2, "model.layers.0.mlp.up_proj.weight": 2}
	files := c.Files()
	if len(files) != 3 {
		t.Fatalf("got %d shards, want 3: %v", len(files), files)
	}
	for k, p := range files {
		if want := filepath.Join(dir, ShardName(k+1, 3)); p != want {
			t.Errorf("Files()[%d] = %s, want %s", k, p, want)
		}
	}
	for _, nt := range tensors {
		info, _ := c.Info(nt.Name)
		k := wantShard[nt.Name]
		if k == 0 {
			k = 3
		}
		if want := filepath.Join(dir, ShardName(k, 3)); info.File != want {
			t.Errorf("%s is in %s, want %s", nt.Name, info.File, want)
		}
	}

	raw, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Metadata struct {
			TotalSize int64 `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	if idx.Metadata.TotalSize != c.TotalBytes() || len(idx.WeightMap) != len(tensors) {
		t.Errorf("index total_size %d (want %d), %d entries (want %d)", idx.Metadata.TotalSize, c.TotalBytes(), len(idx.WeightMap), len(tensors))
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(files)+1 {
		t.Errorf("directory holds %d entries, want %d shards + index", len(entries), len(files))
	}
}

func TestCheckpointTiedEmbeddingsMissingTensor(t *testing.T) {
	// A tied checkpoint has no lm_head.weight; asking for it names it and the dir.
	dir := t.TempDir()
	tensors := randomTensors(3)
	if err := WriteFile(filepath.Join(dir, SingleFileName), tensors, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Info("lm_head.weight")
	wantErr(t, err, `"lm_head.weight"`, dir)
	_, err = c.Bytes("lm_head.weight")
	wantErr(t, err, `"lm_head.weight"`, dir)
	wantErr(t, c.ReadInto("lm_head.weight", nil), `"lm_head.weight"`, dir)
}

func TestCheckpointErrors(t *testing.T) {
	tensors := randomTensors(4)

	t.Run("empty directory", func(t *testing.T) {
		dir := t.TempDir()
		_, err := OpenCheckpoint(dir)
		wantErr(t, err, dir, SingleFileName, IndexFileName)
	})

	t.Run("index points at a missing shard", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteSharded(dir, tensors, 1500); err != nil {
			t.Fatal(err)
		}
		// Shard 2 of 3 holds model.layers.0.input_layernorm.weight and up_proj
		// (see TestRoundTripWriteSharded); the error names the first in order.
		if err := os.Remove(filepath.Join(dir, ShardName(2, 3))); err != nil {
			t.Fatal(err)
		}
		_, err := OpenCheckpoint(dir)
		wantErr(t, err, `shard "model-00002-of-00003.safetensors"`, `tensor "model.layers.0.input_layernorm.weight"`, "does not exist", IndexFileName)
	})

	t.Run("tensor in weight_map absent from its shard", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteSharded(dir, tensors, 1<<20); err != nil {
			t.Fatal(err)
		}
		index := `{"metadata":{"total_size":1},"weight_map":{"model.norm.weight":"model-00001-of-00001.safetensors","ghost.weight":"model-00001-of-00001.safetensors"}}`
		if err := os.WriteFile(filepath.Join(dir, IndexFileName), []byte(index), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := OpenCheckpoint(dir)
		wantErr(t, err, `"ghost.weight"`, "model-00001-of-00001.safetensors", "does not contain it")
	})

	t.Run("garbled index", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, IndexFileName), []byte("{\n  \"weight_map\": {,}\n}"), 0o644)
		_, err := OpenCheckpoint(dir)
		wantErr(t, err, IndexFileName, "line 2, column")
	})

	t.Run("empty weight_map", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, IndexFileName), []byte(`{"weight_map":{}}`), 0o644)
		_, err := OpenCheckpoint(dir)
		wantErr(t, err, IndexFileName, "weight_map is missing or empty")
	})

	t.Run("shard path escapes the directory", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, IndexFileName), []byte(`{"weight_map":{"w":"../x.safetensors"}}`), 0o644)
		_, err := OpenCheckpoint(dir)
		wantErr(t, err, `"../x.safetensors"`, `tensor "w"`)
	})

	t.Run("corrupt shard", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteSharded(dir, tensors, 1<<20); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, ShardName(1, 1))
		st, _ := os.Stat(p)
		if err := os.Truncate(p, st.Size()-3); err != nil {
			t.Fatal(err)
		}
		_, err := OpenCheckpoint(dir)
		wantErr(t, err, dir, ShardName(1, 1), "truncated")
	})

	t.Run("truncated single file", func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, SingleFileName)
		if err := WriteFile(p, tensors, nil); err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(p)
		os.Truncate(p, st.Size()-1)
		_, err := OpenCheckpoint(dir)
		wantErr(t, err, p, "truncated")
	})
}
