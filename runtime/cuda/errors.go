package cuda

import "errors"

// ErrNotBuilt is returned by Open in builds without the cuda tag. It is
// declared in both builds so that callers can test for it either way.
var ErrNotBuilt = errors.New("built without CUDA (rebuild with -tags cuda: make build-cuda)")
