//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"unsafe"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestNCCLCollectives: an NCCL group over every visible GPU (one GPU is a
// group of one: the NCCL path still runs) sums F32 and BF16 tensors and
// gathers them, each rank from its own goroutine on its compute stream;
// after Abort every collective fails with ErrCommAborted.
func TestNCCLCollectives(t *testing.T) {
	v, where, err := NCCLVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL %d: %s", v, where)
	n, err := DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]runtime.Device, n)
	for i := range devs {
		d, err := Open(i)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
	}
	comms, err := NewNCCLGroup(devs)
	if err != nil {
		t.Fatal(err)
	}
	const elems = 1000
	each := func(f func(r int) error) {
		t.Helper()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = f(r) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	value := func(r, i int) float32 { return float32(r+1) + float32(i%7)*0.25 }
	for _, dt := range []runtime.DType{runtime.F32, runtime.BF16} {
		got := make([][]float32, n)
		each(func(r int) error {
			dev := devs[r].(*Device)
			x, err := runtime.NewTensor(dev, dt, runtime.Shape{elems}, "nccl test")
			if err != nil {
				return err
			}
			defer x.Buffer().Free()
			host := make([]byte, x.NumBytes())
			for i := range elems {
				if dt == runtime.F32 {
					*(*float32)(unsafe.Pointer(&host[4*i])) = value(r, i)
				} else {
					*(*uint16)(unsafe.Pointer(&host[2*i])) = runtime.F32ToBF16(value(r, i))
				}
			}
			s := dev.ComputeStream()
			if err := s.Upload(x.Ptr(), host); err != nil {
				return err
			}
			if err := comms[r].AllReduceSum(x, s); err != nil {
				return err
			}
			if err := s.Download(host, x.Ptr()); err != nil {
				return err
			}
			got[r] = make([]float32, elems)
			for i := range elems {
				if dt == runtime.F32 {
					got[r][i] = *(*float32)(unsafe.Pointer(&host[4*i]))
				} else {
					got[r][i] = runtime.BF16ToF32(*(*uint16)(unsafe.Pointer(&host[2*i])))
				}
			}
			return nil
		})
		for r := range n {
			for i := range elems {
				var want float32
				for k := range n {
					want += value(k, i)
				}
				if math.Abs(float64(got[r][i]-want)) > 1e-2*float64(want) {
					t.Fatalf("%v rank %d element %d: %g, want %g", dt, r, i, got[r][i], want)
				}
			}
		}
	}
	each(func(r int) error {
		dev := devs[r].(*Device)
		src, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{3}, "gather src")
		if err != nil {
			return err
		}
		defer src.Buffer().Free()
		dst, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{3 * n}, "gather dst")
		if err != nil {
			return err
		}
		defer dst.Buffer().Free()
		in := []float32{float32(r), float32(10 * r), float32(100 * r)}
		s := dev.ComputeStream()
		if err := s.Upload(src.Ptr(), unsafe.Slice((*byte)(unsafe.Pointer(&in[0])), 12)); err != nil {
			return err
		}
		if err := comms[r].AllGather(dst, src, s); err != nil {
			return err
		}
		out := make([]float32, 3*n)
		if err := s.Download(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 12*n), dst.Ptr()); err != nil {
			return err
		}
		for k := range n {
			if out[3*k] != float32(k) || out[3*k+1] != float32(10*k) || out[3*k+2] != float32(100*k) {
				return fmt.Errorf("rank %d gathered %v", r, out)
			}
		}
		return nil
	})
	comms[0].Abort(errors.New("test abort"))
	x, err := runtime.NewTensor(devs[0], runtime.F32, runtime.Shape{4}, "after abort")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Buffer().Free()
	if err := comms[0].AllReduceSum(x, devs[0].Compute()); !errors.Is(err, runtime.ErrCommAborted) {
		t.Fatalf("all-reduce after abort: %v, want ErrCommAborted", err)
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestNCCLCloseAfterUse: a group that ran a collective closes cleanly (a
// second Close is a no-op).
func TestNCCLCloseAfterUse(t *testing.T) {
	d := open(t, Options{})
	comms, err := NewNCCLGroup([]runtime.Device{d})
	if err != nil {
		t.Fatal(err)
	}
	x, err := runtime.NewTensor(d, runtime.F32, runtime.Shape{16}, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Buffer().Free()
	if err := comms[0].AllReduceSum(x, d.Compute()); err != nil {
		t.Fatal(err)
	}
	if err := d.Compute().Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].AllReduceSum(x, d.Compute()); err == nil {
		t.Fatal("all-reduce after Close succeeded")
	}
}
