package loader

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/flextensor-go/flextensor/runtime"
)

// TensorSpec names a tensor to be written and gives its element type and
// shape; its size is the product of Shape times DType.Size().
type TensorSpec struct {
	Name  string
	DType runtime.DType
	Shape []int
}

// NamedTensor is a tensor to be written, with its bytes (little-endian,
// row-major); len(Data) must equal the size its DType and Shape give.
type NamedTensor struct {
	Name  string
	DType runtime.DType
	Shape []int
	Data  []byte
}

// writeBudget bounds the bytes of tensor buffers in flight in WriteFileFunc;
// a single tensor larger than this is still written, alone.
const writeBudget = 512 << 20

// WriteFile writes tensors to path in the safetensors format: an 8-byte
// little-endian header length, a JSON header (padded with spaces to a multiple
// of 8 bytes) giving each tensor's dtype, shape and data_offsets, plus
// metadata under "__metadata__" when non-empty, then the data. Tensors are
// laid out by decreasing element size (in the given order within a size), so
// every tensor is aligned to its element size. The file is written under a
// temporary name and renamed into place, so a failed write leaves no file.
func WriteFile(path string, tensors []NamedTensor, metadata map[string]string) error {
	specs := make([]TensorSpec, len(tensors))
	for i, t := range tensors {
		specs[i] = TensorSpec{t.Name, t.DType, t.Shape}
		if n, err := specBytes(specs[i]); err == nil && n != int64(len(t.Data)) {
			return fmt.Errorf("safetensors %s: tensor %q: shape %v of %s needs %d bytes, data has %d", path, t.Name, t.Shape, t.DType, n, len(t.Data))
		}
	}
	return WriteFileFunc(path, specs, metadata, func(i int, dst []byte) error {
		copy(dst, tensors[i].Data)
		return nil
	})
}

// WriteFileFunc writes a safetensors file like WriteFile, but streams the
// data: after writing the header it calls fill(i, dst) once for each specs[i],
// with a zeroed dst of exactly that tensor's size, which fill must set to the
// tensor's bytes and must not retain after returning (buffers are reused).
// Calls run concurrently on several goroutines (distinct i)
// with a bounded amount of buffer memory in flight, and each filled buffer is
// written at its offset with a positioned write. The first error from fill
// (or a panic in it, turned into an error) stops the write and is returned,
// naming the tensor.
func WriteFileFunc(path string, specs []TensorSpec, metadata map[string]string, fill func(i int, dst []byte) error) error {
	header, offsets, err := buildHeader(specs, metadata)
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(header); err != nil {
		return fmt.Errorf("safetensors %s: writing header: %w", path, err)
	}
	base := int64(len(header))
	if err := fillTensors(tmp, base, specs, offsets, fill); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	ok = true
	return nil
}

// specBytes is the size in bytes of the tensor s describes.
func specBytes(s TensorSpec) (int64, error) {
	es := s.DType.Size()
	if es == 0 {
		return 0, fmt.Errorf("tensor %q: invalid dtype %v", s.Name, s.DType)
	}
	n := int64(es)
	for _, d := range s.Shape {
		if d < 0 {
			return 0, fmt.Errorf("tensor %q: negative dimension in shape %v", s.Name, s.Shape)
		}
		if d != 0 && n > math.MaxInt64/int64(d) {
			return 0, fmt.Errorf("tensor %q: shape %v of %s is too large", s.Name, s.Shape, s.DType)
		}
		n *= int64(d)
	}
	return n, nil
}

// buildHeader validates specs and returns the length-prefixed, padded header
// and each tensor's data offset (relative to the data section).
func buildHeader(specs []TensorSpec, metadata map[string]string) ([]byte, []int64, error) {
	sizes := make([]int64, len(specs))
	seen := make(map[string]bool, len(specs))
	for i, s := range specs {
		if s.Name == "" {
			return nil, nil, fmt.Errorf("tensor %d has an empty name", i)
		}
		if s.Name == "__metadata__" {
			return nil, nil, fmt.Errorf("tensor name %q is reserved", s.Name)
		}
		if seen[s.Name] {
			return nil, nil, fmt.Errorf("tensor %q appears twice", s.Name)
		}
		seen[s.Name] = true
		n, err := specBytes(s)
		if err != nil {
			return nil, nil, err
		}
		sizes[i] = n
	}
	// Decreasing element size keeps every offset a multiple of its element size
	// (sizes are powers of two) without gaps, which the format forbids.
	order := make([]int, len(specs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return specs[order[a]].DType.Size() > specs[order[b]].DType.Size() })

	offsets := make([]int64, len(specs))
	var buf bytes.Buffer
	buf.Write(make([]byte, 8)) // the length, filled in below
	buf.WriteByte('{')
	if len(metadata) > 0 {
		buf.WriteString(`"__metadata__":`)
		m, err := json.Marshal(metadata) // keys sorted
		if err != nil {
			return nil, nil, err
		}
		buf.Write(m)
	}
	var off int64
	for k, i := range order {
		if k > 0 || len(metadata) > 0 {
			buf.WriteByte(',')
		}
		if off > math.MaxInt64-sizes[i] {
			return nil, nil, fmt.Errorf("tensor %q: total size overflows", specs[i].Name)
		}
		offsets[i] = off
		name, _ := json.Marshal(specs[i].Name)
		buf.Write(name)
		buf.WriteString(`:{"dtype":"`)
		buf.WriteString(specs[i].DType.String())
		buf.WriteString(`","shape":[`)
		for j, d := range specs[i].Shape {
			if j > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&buf, `],"data_offsets":[%d,%d]}`, off, off+sizes[i])
		off += sizes[i]
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	h := buf.Bytes()
	binary.LittleEndian.PutUint64(h[:8], uint64(len(h)-8))
	return h, offsets, nil
}

// fillTensors runs fill for every tensor on a pool of goroutines and writes
// each buffer at base+offsets[i].
func fillTensors(f *os.File, base int64, specs []TensorSpec, offsets []int64, fill func(int, []byte) error) error {
	// Jobs go out in file order so the writes are roughly sequential.
	order := make([]int, len(specs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(offsets[a], offsets[b]) })

	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		inFlight int64
		firstErr error
	)
	acquire := func(n int64) bool {
		mu.Lock()
		defer mu.Unlock()
		for firstErr == nil && inFlight > 0 && inFlight+n > writeBudget {
			cond.Wait()
		}
		if firstErr != nil {
			return false
		}
		inFlight += n
		return true
	}
	release := func(n int64, err error) {
		mu.Lock()
		inFlight -= n
		if err != nil && firstErr == nil {
			firstErr = err
		}
		cond.Broadcast()
		mu.Unlock()
	}
	var bufs bufPool // local, so its buffers die with this call
	one := func(i int, n int64) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("tensor %q: fill panicked: %v", specs[i].Name, r)
			}
		}()
		buf := bufs.get(n)
		defer bufs.put(buf)
		if err := fill(i, buf); err != nil {
			return fmt.Errorf("tensor %q: %w", specs[i].Name, err)
		}
		if _, err := f.WriteAt(buf, base+offsets[i]); err != nil {
			return fmt.Errorf("tensor %q: %w", specs[i].Name, err)
		}
		return nil
	}

	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(goruntime.GOMAXPROCS(0), max(len(specs), 1)) {
		wg.Go(func() {
			for i := range jobs {
				n, _ := specBytes(specs[i]) // validated by buildHeader
				if !acquire(n) {
					continue
				}
				release(n, one(i, n))
			}
		})
	}
	for _, i := range order {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return firstErr
}

// ShardName is the Hugging Face name of shard k (1-based) of n:
// "model-00001-of-00003.safetensors".
func ShardName(k, n int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", k, n) }

// WriteSharded writes tensors into dir (created if needed) as shards named by
// ShardName plus model.safetensors.index.json, whose weight_map maps every
// tensor to its shard and whose metadata.total_size is the sum of tensor
// sizes. Tensors fill shards in the given order; a shard is closed before it
// would exceed maxShardBytes of data, and a tensor larger than that gets a
// shard of its own. The index is written even for a single shard.
func WriteSharded(dir string, tensors []NamedTensor, maxShardBytes int64) error {
	specs := make([]TensorSpec, len(tensors))
	for i, t := range tensors {
		specs[i] = TensorSpec{t.Name, t.DType, t.Shape}
		if n, err := specBytes(specs[i]); err == nil && n != int64(len(t.Data)) {
			return fmt.Errorf("checkpoint %s: tensor %q: shape %v of %s needs %d bytes, data has %d", dir, t.Name, t.Shape, t.DType, n, len(t.Data))
		}
	}
	return WriteShardedFunc(dir, specs, maxShardBytes, func(i int, dst []byte) error {
		copy(dst, tensors[i].Data)
		return nil
	})
}

// WriteShardedFunc is the streaming form of WriteSharded: fill(i, dst) sets
// the bytes of specs[i], as in WriteFileFunc. Shards are written one after
// another, each in parallel.
func WriteShardedFunc(dir string, specs []TensorSpec, maxShardBytes int64, fill func(i int, dst []byte) error) error {
	if maxShardBytes <= 0 {
		return fmt.Errorf("checkpoint %s: maxShardBytes must be positive, got %d", dir, maxShardBytes)
	}
	if len(specs) == 0 {
		return fmt.Errorf("checkpoint %s: no tensors to write", dir)
	}
	// Validate everything (names, sizes) before creating any file.
	if _, _, err := buildHeader(specs, nil); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	var shards [][]int // indices into specs
	var cur []int
	var curBytes, total int64
	for i, s := range specs {
		n, _ := specBytes(s)
		if len(cur) > 0 && curBytes+n > maxShardBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, i)
		curBytes += n
		total += n
	}
	shards = append(shards, cur)

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	weightMap := make(map[string]string, len(specs))
	for k, idx := range shards {
		name := ShardName(k+1, len(shards))
		sub := make([]TensorSpec, len(idx))
		for j, i := range idx {
			sub[j] = specs[i]
			weightMap[specs[i].Name] = name
		}
		err := WriteFileFunc(filepath.Join(dir, name), sub, map[string]string{"format": "pt"},
			func(j int, dst []byte) error { return fill(idx[j], dst) })
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
	}
	index, err := json.MarshalIndent(struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": total}, weightMap}, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := writeFileAtomic(filepath.Join(dir, IndexFileName), append(index, '\n')); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return nil
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// into place.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// bufPool recycles tensor buffers between fills: reusing one (clear is a
// memclr) is several times cheaper than faulting in fresh pages for each.
type bufPool struct{ p sync.Pool }

// get returns a zeroed buffer of n bytes.
func (bp *bufPool) get(n int64) []byte {
	if b, ok := bp.p.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		buf := (*b)[:n]
		clear(buf)
		return buf
	}
	return make([]byte, n)
}

func (bp *bufPool) put(b []byte) { bp.p.Put(&b) }
