package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// merge is the outcome of merging a pair of adjacent tokens: the rank of the
// merge rule (lower applies first) and the id of the merged token.
type merge struct {
	rank  int32
	newID int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpe is a byte-pair-encoding model ("model": {"type": "BPE"}).
type bpe struct {
	vocab        map[string]int
	merges       map[uint64]merge
	unkID        int // -1 when there is no unknown token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	byteIDs      [256]int32            // ids of the "<0xXX>" tokens; -1 where missing
	smallRunes   [smallRuneLimit]int32 // ids of one-character tokens below smallRuneLimit; -1 where missing

	mu    sync.RWMutex
	cache map[string][]int32
}

const (
	// smallRuneLimit bounds the characters whose token ids are looked up
	// in a table rather than the vocabulary map; it covers ASCII, Latin-1
	// and the characters of the byte-level alphabet.
	smallRuneLimit = 512
	// cacheMaxWord is the longest word (in bytes) whose tokens are cached.
	cacheMaxWord = 256
	// cacheMaxEntries bounds the cache; it is emptied when full.
	cacheMaxEntries = 1 << 16
	// quadraticMax is the symbol count up to which merges are found by
	// scanning; longer words use a priority queue.
	quadraticMax = 48
)

// tokenize appends the ids of one pre-tokenized word to dst.
func (m *bpe) tokenize(dst []int, word string) []int {
	if word == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(word) <= cacheMaxWord
	if cacheable {
		m.mu.RLock()
		ids, ok := m.cache[word]
		m.mu.RUnlock()
		if ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	var buf [64]int32
	ids := m.initial(buf[:0], word)
	if len(ids) <= quadraticMax {
		ids = m.mergeScan(ids)
	} else {
		ids = m.mergeHeap(ids)
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	if cacheable {
		stored := append([]int32(nil), ids...)
		m.mu.Lock()
		if len(m.cache) >= cacheMaxEntries {
			clear(m.cache)
		}
		m.cache[word] = stored
		m.mu.Unlock()
	}
	return dst
}

// indexRunes fills smallRunes from the vocabulary.
func (m *bpe) indexRunes() {
	for r := range m.smallRunes {
		m.smallRunes[r] = -1
		if id, ok := m.vocab[string(rune(r))]; ok {
			m.smallRunes[r] = int32(id)
		}
	}
}

// initial appends the starting symbols of word to dst: one token per
// character, byte tokens for characters outside the vocabulary when byte
// fallback is on, and otherwise the unknown token (runs of unknown
// characters fused into one when fuse_unk is set). Characters with none of
// these are dropped, as in Hugging Face.
func (m *bpe) initial(dst []int32, word string) []int32 {
	pendingUnk := false
	for i := 0; i < len(word); {
		r, size := rune(word[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(word[i:])
		}
		ch := word[i : i+size]
		i += size
		id, ok := -1, false
		if r < smallRuneLimit && r != utf8.RuneError {
			id = int(m.smallRunes[r])
			ok = id >= 0
		} else {
			id, ok = m.vocab[ch]
		}
		if ok {
			if pendingUnk {
				dst = append(dst, int32(m.unkID))
				pendingUnk = false
			}
			dst = append(dst, int32(id))
			continue
		}
		if m.byteFallback {
			all := true
			for j := 0; j < len(ch); j++ {
				if m.byteIDs[ch[j]] < 0 {
					all = false
					break
				}
			}
			if all {
				for j := 0; j < len(ch); j++ {
					dst = append(dst, m.byteIDs[ch[j]])
				}
				continue
			}
		}
		if m.unkID >= 0 {
			if pendingUnk && !m.fuseUnk {
				dst = append(dst, int32(m.unkID))
			}
			pendingUnk = true
		}
	}
	if pendingUnk {
		dst = append(dst, int32(m.unkID))
	}
	return dst
}

// mergeScan applies merges to a short word: repeatedly the lowest-ranked
// adjacent pair, leftmost first.
func (m *bpe) mergeScan(ids []int32) []int32 {
	if len(ids) < 2 {
		return ids
	}
	const none = int32(1<<31 - 1)
	var rbuf [quadraticMax]merge
	ranks := rbuf[:0]
	if len(ids)-1 > len(rbuf) {
		ranks = make([]merge, len(ids)-1)
	} else {
		ranks = rbuf[:len(ids)-1]
	}
	lookup := func(a, b int32) merge {
		if mg, ok := m.merges[pairKey(a, b)]; ok {
			return mg
		}
		return merge{rank: none}
	}
	for i := range ranks {
		ranks[i] = lookup(ids[i], ids[i+1])
	}
	for len(ids) > 1 {
		best := -1
		bestRank := none
		for i, r := range ranks {
			if r.rank < bestRank {
				best, bestRank = i, r.rank
			}
		}
		if best < 0 {
			break
		}
		ids[best] = ranks[best].newID
		copy(ids[best+1:], ids[best+2:])
		ids = ids[:len(ids)-1]
		copy(ranks[best:], ranks[best+1:])
		ranks = ranks[:len(ranks)-1]
		if best > 0 {
			ranks[best-1] = lookup(ids[best-1], ids[best])
		}
		if best < len(ranks) {
			ranks[best] = lookup(ids[best], ids[best+1])
		}
	}
	return ids
}

// candidate is a possible merge of the symbol at pos with its right
// neighbour, queued by rank and then position.
type candidate struct {
	rank int32
	pos  int32
}

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// mergeHeap applies merges to a long word with a priority queue of
// candidate pairs over a linked list of symbols. It gives the same result as
// mergeScan in O(n log n).
func (m *bpe) mergeHeap(ids []int32) []int32 {
	n := len(ids)
	if n < 2 {
		return ids
	}
	prev := make([]int32, n)
	next := make([]int32, n)
	for i := range ids {
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
	}
	next[n-1] = -1
	alive := make([]bool, n)
	for i := range alive {
		alive[i] = true
	}
	h := make(candHeap, 0, n)
	for i := 0; i+1 < n; i++ {
		if mg, ok := m.merges[pairKey(ids[i], ids[i+1])]; ok {
			h = append(h, candidate{mg.rank, int32(i)})
		}
	}
	h.init()
	for len(h) > 0 {
		c := h.pop()
		pos := c.pos
		if !alive[pos] || next[pos] < 0 {
			continue
		}
		right := next[pos]
		mg, ok := m.merges[pairKey(ids[pos], ids[right])]
		if !ok || mg.rank != c.rank {
			continue // stale: one side has changed since it was queued
		}
		ids[pos] = mg.newID
		alive[right] = false
		next[pos] = next[right]
		if next[pos] >= 0 {
			prev[next[pos]] = pos
		}
		if p := prev[pos]; p >= 0 {
			if mg, ok := m.merges[pairKey(ids[p], ids[pos])]; ok {
				h.push(candidate{mg.rank, p})
			}
		}
		if nx := next[pos]; nx >= 0 {
			if mg, ok := m.merges[pairKey(ids[pos], ids[nx])]; ok {
				h.push(candidate{mg.rank, pos})
			}
		}
	}
	out := ids[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, ids[i])
	}
	return out
}

// candHeap is a binary min-heap of candidates.
type candHeap []candidate

func (h candHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *candHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !s[i].less(s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *candHeap) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	h.down(0)
	return top
}

func (h candHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		small := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			small = r
		}
		if !h[small].less(h[i]) {
			return
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
}
