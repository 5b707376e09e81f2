package loader

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
)

// The file names of a Hugging Face checkpoint directory.
const (
	SingleFileName = "model.safetensors"            // an unsharded checkpoint
	IndexFileName  = "model.safetensors.index.json" // the index of a sharded one
)

// Checkpoint is the set of tensors of a checkpoint directory: either one
// model.safetensors, or the shards named by model.safetensors.index.json.
// Every shard is memory-mapped; its methods may be called from several
// goroutines at once, except Close.
type Checkpoint struct {
	dir   string
	files []*File          // open shards, in index order
	where map[string]*File // tensor name -> the file holding it
	names []string         // sorted
	total int64
	read  atomic.Int64 // bytes read by ReadAt
}

// shardIndex is the layout of model.safetensors.index.json.
type shardIndex struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// OpenCheckpoint opens the checkpoint in dir. When dir holds
// model.safetensors.index.json, its weight_map (tensor name -> shard file)
// decides which tensors exist and where; a shard that is missing, or that
// lacks a tensor the index places in it, is an error naming both. Otherwise
// dir must hold model.safetensors, and all its tensors are the checkpoint.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	indexPath := filepath.Join(dir, IndexFileName)
	raw, err := ReadRegularFile(indexPath)
	switch {
	case err == nil:
		return openSharded(dir, indexPath, raw)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	single := filepath.Join(dir, SingleFileName)
	if _, err := os.Lstat(single); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: neither %s nor %s found", dir, SingleFileName, IndexFileName)
	}
	f, err := OpenFile(single)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	c := &Checkpoint{dir: dir, files: []*File{f}, where: make(map[string]*File, len(f.names)), names: f.Names()}
	for _, n := range f.names {
		c.where[n] = f
		c.total += f.tensors[n].Size
	}
	return c, nil
}

func openSharded(dir, indexPath string, raw []byte) (*Checkpoint, error) {
	var idx shardIndex
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("checkpoint index %s: %w", indexPath, describeJSONError(raw, err))
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("checkpoint index %s: weight_map is missing or empty", indexPath)
	}
	c := &Checkpoint{dir: dir, where: make(map[string]*File, len(idx.WeightMap))}
	c.names = make([]string, 0, len(idx.WeightMap))
	for name := range idx.WeightMap {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)

	opened := make(map[string]*File)
	for _, name := range c.names {
		shard := idx.WeightMap[name]
		f, ok := opened[shard]
		if !ok {
			if !filepath.IsLocal(shard) {
				c.Close()
				return nil, fmt.Errorf("checkpoint index %s: tensor %q: shard %q is not a file name inside %s", indexPath, name, shard, dir)
			}
			p := filepath.Join(dir, shard)
			var err error
			if f, err = OpenFile(p); err != nil {
				c.Close()
				if errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("checkpoint index %s: shard %q (holding tensor %q) does not exist", indexPath, shard, name)
				}
				return nil, fmt.Errorf("checkpoint %s: shard %q: %w", dir, shard, err)
			}
			opened[shard] = f
			c.files = append(c.files, f)
		}
		t, ok := f.tensors[name]
		if !ok {
			c.Close()
			return nil, fmt.Errorf("checkpoint index %s: tensor %q is mapped to shard %q, which does not contain it", indexPath, name, shard)
		}
		c.where[name] = f
		c.total += t.Size
	}
	slices.SortFunc(c.files, func(a, b *File) int { return strings.Compare(a.path, b.path) })
	return c, nil
}

// Dir is the checkpoint directory.
func (c *Checkpoint) Dir() string { return c.dir }

// Names lists the checkpoint's tensor names in sorted order.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Files lists the paths of the checkpoint's safetensors files, sorted.
func (c *Checkpoint) Files() []string {
	out := make([]string, len(c.files))
	for i, f := range c.files {
		out[i] = f.path
	}
	return out
}

// Info describes the tensor called name; a name the checkpoint lacks is an
// error naming it and the checkpoint directory.
func (c *Checkpoint) Info(name string) (TensorInfo, error) {
	f, ok := c.where[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("checkpoint %s: no tensor %q", c.dir, name)
	}
	return f.Info(name)
}

// Bytes returns the tensor's bytes as a zero-copy, read-only view into its
// file's mapping (see File.Bytes); the view is invalid after Close.
func (c *Checkpoint) Bytes(name string) ([]byte, error) {
	f, ok := c.where[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: no tensor %q", c.dir, name)
	}
	return f.Bytes(name)
}

// ReadInto copies the tensor's bytes into dst (len(dst) must equal its Size)
// with a positioned read on the file rather than through the mapping.
func (c *Checkpoint) ReadInto(name string, dst []byte) error {
	f, ok := c.where[name]
	if !ok {
		return fmt.Errorf("checkpoint %s: no tensor %q", c.dir, name)
	}
	return f.ReadInto(name, dst)
}

// TotalBytes is the sum of the sizes of the checkpoint's tensors.
func (c *Checkpoint) TotalBytes() int64 { return c.total }

// Close unmaps and closes every file; it returns the first error. Views
// returned by Bytes become invalid. Closing twice is harmless.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ReadAt fills dst with bytes [off, off+len(dst)) of the named tensor by a
// positioned read on its file (the mapping is not touched). Bytes read this
// way are counted in BytesRead.
func (c *Checkpoint) ReadAt(name string, dst []byte, off int64) error {
	f, ok := c.where[name]
	if !ok {
		return fmt.Errorf("checkpoint %s: no tensor %q", c.dir, name)
	}
	t, err := f.Info(name)
	if err != nil {
		return err
	}
	if off < 0 || off+int64(len(dst)) > t.Size {
		return fmt.Errorf("checkpoint %s: tensor %q: read [%d, %d) outside its %d bytes", c.dir, name, off, off+int64(len(dst)), t.Size)
	}
	n, err := f.f.ReadAt(dst, t.Offset+off)
	c.read.Add(int64(n))
	if err != nil {
		return fmt.Errorf("safetensors %s: reading tensor %q: %w", f.path, name, err)
	}
	return nil
}

// BytesRead is the number of bytes ReadAt has read.
func (c *Checkpoint) BytesRead() int64 { return c.read.Load() }
