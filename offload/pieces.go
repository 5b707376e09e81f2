package offload

import "sync"

// inPieces runs f over [0, n) cut into pieces of at most piece bytes, on
// up to workers goroutines, and returns the first error f gave (every piece
// is still visited). The host-side bulk copies of the engine use it: the
// embedding table's read into mapped memory, a block moved by the
// reallocation of slow host blocks.
func inPieces(n, piece int64, workers int, f func(lo, hi int64) error) error {
	if n <= 0 {
		return nil
	}
	pieces := int((n + piece - 1) / piece)
	workers = min(max(workers, 1), pieces)
	next := make(chan int64, pieces)
	for off := int64(0); off < n; off += piece {
		next <- off
	}
	close(next)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := range next {
				if err := f(off, min(off+piece, n)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}
