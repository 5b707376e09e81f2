// Package kernelcache keeps compiled GPU kernels (cubins) on disk so that a
// process does not compile them again with NVRTC at every start. It is pure
// Go and builds without the cuda tag; runtime/cuda calls it around its NVRTC
// compile.
//
// An entry is keyed by everything that decides the compiled image: the
// source, the compiler options, the GPU architecture, the driver version and
// the NVRTC version (Key). Each file carries the full key hash and a SHA-256
// of its image, so a truncated, corrupted or misplaced file is detected on
// read, removed and reported as a miss, never used. Writes go to a temporary
// file in the same directory that is renamed into place, so readers never see
// a partial file and concurrent writers of one key leave one whole entry.
//
// Where: $FT_KERNEL_CACHE when set ("off" disables the cache), otherwise
// os.UserCacheDir()/flextensor/kernels. Kernels built ahead of time (make
// build-cuda runs `infer-cuda kernels --out bin/kernels`) are read from the
// directory "kernels" next to the executable too, so the first run on a
// machine loads them instead of compiling.
package kernelcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// EnvVar names the environment variable that overrides the cache directory.
const EnvVar = "FT_KERNEL_CACHE"

// ErrMiss is wrapped by Get's error when no usable entry exists: none was
// found, or the one found was corrupt (and has been removed).
var ErrMiss = errors.New("not in the kernel cache")

// Key is what a compiled image depends on.
type Key struct {
	// Name is the module's name (only for messages; not hashed).
	Name string
	// Source is the CUDA C++ translation unit.
	Source string
	// Options are the compiler options, in order.
	Options []string
	// Arch is the compute capability as major*10+minor (90 for sm_90).
	Arch int
	// Driver is the CUDA driver version (cuDriverGetVersion, e.g. 13000).
	Driver int
	// NVRTCMajor and NVRTCMinor are the NVRTC version.
	NVRTCMajor, NVRTCMinor int
}

// Sum is the SHA-256 of an unambiguous encoding of the key (every part
// length-prefixed).
func (k Key) Sum() [32]byte {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("flextensor kernel cache key v1")
	field(k.Source)
	field(strconv.Itoa(len(k.Options)))
	for _, o := range k.Options {
		field(o)
	}
	field(fmt.Sprintf("sm_%d driver %d nvrtc %d.%d", k.Arch, k.Driver, k.NVRTCMajor, k.NVRTCMinor))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// FileName is the entry's file name in a cache directory.
func (k Key) FileName() string {
	s := k.Sum()
	return fmt.Sprintf("sm%d-%s.cubin", k.Arch, hex.EncodeToString(s[:16]))
}

// Cache is a directory of entries plus read-only directories searched after
// it. The zero value caches nothing.
type Cache struct {
	// Dir is read and written; "" disables writing (and reading it).
	Dir string
	// ReadOnly directories are searched after Dir and never written
	// (kernels built ahead of time).
	ReadOnly []string
}

// Default is the cache of this process: $FT_KERNEL_CACHE, or the user cache
// directory's flextensor/kernels, read and written, then the "kernels"
// directory next to the executable, read only. FT_KERNEL_CACHE=off gives a
// cache that holds nothing (every kernel is compiled).
func Default() *Cache {
	c := &Cache{}
	switch env := os.Getenv(EnvVar); env {
	case "off":
		return c
	case "":
		if base, err := os.UserCacheDir(); err == nil {
			c.Dir = filepath.Join(base, "flextensor", "kernels")
		}
	default:
		c.Dir = env
	}
	if exe, err := os.Executable(); err == nil {
		if d := filepath.Join(filepath.Dir(exe), "kernels"); d != c.Dir {
			c.ReadOnly = append(c.ReadOnly, d)
		}
	}
	return c
}

// The file format: magic, the key's SHA-256, the image length (uint64 little
// endian), the image's SHA-256, the image.
var magic = []byte("FTKCUBIN1\n")

const headerLen = 10 + 32 + 8 + 32

func encode(k Key, image []byte) []byte {
	out := make([]byte, 0, headerLen+len(image))
	out = append(out, magic...)
	ks := k.Sum()
	out = append(out, ks[:]...)
	out = binary.LittleEndian.AppendUint64(out, uint64(len(image)))
	is := sha256.Sum256(image)
	out = append(out, is[:]...)
	return append(out, image...)
}

// decode checks data against k and returns the image, or what is wrong.
func decode(k Key, data []byte) ([]byte, error) {
	if len(data) < headerLen {
		return nil, fmt.Errorf("truncated (%d bytes, the header alone is %d)", len(data), headerLen)
	}
	if !bytes.Equal(data[:len(magic)], magic) {
		return nil, errors.New("not a kernel cache file (bad magic)")
	}
	p := data[len(magic):]
	ks := k.Sum()
	if !bytes.Equal(p[:32], ks[:]) {
		return nil, errors.New("holds another key")
	}
	n := binary.LittleEndian.Uint64(p[32:40])
	sum := p[40:72]
	image := p[72:]
	if uint64(len(image)) != n {
		return nil, fmt.Errorf("image is %d bytes, the header says %d (truncated or extended)", len(image), n)
	}
	if is := sha256.Sum256(image); !bytes.Equal(is[:], sum) {
		return nil, errors.New("image checksum mismatch")
	}
	return image, nil
}

// Get returns the image cached for k. A miss is a *MissError (wrapping
// ErrMiss); a corrupt entry
// in Dir is removed and reported as a miss saying what was wrong (a corrupt
// one in a read-only directory is skipped).
func (c *Cache) Get(k Key) ([]byte, error) {
	if c == nil {
		return nil, &MissError{Name: k.Name}
	}
	var problems []error
	dirs := c.ReadOnly
	if c.Dir != "" {
		dirs = append([]string{c.Dir}, dirs...)
	}
	for i, dir := range dirs {
		path := filepath.Join(dir, k.FileName())
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			problems = append(problems, err)
			continue
		}
		image, err := decode(k, data)
		if err == nil {
			return image, nil
		}
		if i == 0 && c.Dir != "" {
			os.Remove(path)
			err = fmt.Errorf("%s: %w (removed)", path, err)
		} else {
			err = fmt.Errorf("%s: %w (skipped)", path, err)
		}
		problems = append(problems, err)
	}
	return nil, &MissError{Name: k.Name, Problems: problems}
}

// MissError is Get's error: nothing usable was cached for Name; Problems
// says what was wrong with the entries found (empty for a plain miss).
type MissError struct {
	Name     string
	Problems []error
}

// Error names the module that was not in the cache, with the problems found.
func (e *MissError) Error() string {
	if len(e.Problems) == 0 {
		return fmt.Sprintf("%s: %v", e.Name, ErrMiss)
	}
	return fmt.Sprintf("%s: %v: %v", e.Name, ErrMiss, errors.Join(e.Problems...))
}

// Is makes errors.Is(err, ErrMiss) true.
func (e *MissError) Is(target error) bool { return target == ErrMiss }

// Put stores image under k in Dir (made if missing): written to a temporary
// file, synced, then renamed into place. Without a Dir it does nothing.
func (c *Cache) Put(k Key, image []byte) (err error) {
	if c == nil || c.Dir == "" {
		return nil
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	f, err := os.CreateTemp(c.Dir, ".tmp-"+k.FileName()+"-*")
	if err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(encode(k, image)); err != nil {
		return fmt.Errorf("kernel cache: writing %s: %w", f.Name(), err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	if err = os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	if err = os.Rename(f.Name(), filepath.Join(c.Dir, k.FileName())); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	return nil
}

// Load returns the image for k from the cache, or compiles it with compile
// and stores it (a failed store is reported through warn, not as an error:
// the image is good). hit says whether the cache had it; warn, when not nil,
// also hears about corrupt entries that were replaced.
func (c *Cache) Load(k Key, compile func() ([]byte, error), warn func(error)) (image []byte, hit bool, err error) {
	image, gerr := c.Get(k)
	if gerr == nil {
		return image, true, nil
	}
	var miss *MissError
	if warn != nil && (!errors.As(gerr, &miss) || len(miss.Problems) > 0) {
		warn(gerr)
	}
	if image, err = compile(); err != nil {
		return nil, false, err
	}
	if perr := c.Put(k, image); perr != nil && warn != nil {
		warn(perr)
	}
	return image, false, nil
}
