package vllmsim

import "container/heap"

// waitQueue is the waiting queue of one engine: a heap ordered by
// (priority, arrival, order) under Priority, a deque under FCFS. A preempted
// request goes back with prepend: a normal push for the heap (it keeps its
// priority and arrival), the front for the deque (vLLM's prepend_request).
type waitQueue struct {
	prio bool
	h    seqHeap
	d    []*seq // deque: d[head:] are the entries
	head int
}

func (q *waitQueue) len() int {
	if q.prio {
		return len(q.h)
	}
	return len(q.d) - q.head
}

func (q *waitQueue) peek() *seq {
	if q.prio {
		return q.h[0]
	}
	return q.d[q.head]
}

func (q *waitQueue) pop() *seq {
	if q.prio {
		return heap.Pop(&q.h).(*seq)
	}
	s := q.d[q.head]
	q.d[q.head] = nil
	q.head++
	if q.head == len(q.d) {
		q.d, q.head = q.d[:0], 0
	}
	return s
}

// push adds a new request at the back (FCFS) or into the heap.
func (q *waitQueue) push(s *seq) {
	if q.prio {
		heap.Push(&q.h, s)
		return
	}
	q.d = append(q.d, s)
}

// prepend puts a preempted request back: into the heap, or at the front of
// the deque.
func (q *waitQueue) prepend(s *seq) {
	if q.prio {
		heap.Push(&q.h, s)
		return
	}
	if q.head > 0 {
		q.head--
		q.d[q.head] = s
		return
	}
	q.d = append(q.d, nil)
	copy(q.d[1:], q.d)
	q.d[0] = s
}

// remove takes s out of the queue (abort). Cost O(log n) for the heap, O(n)
// for the deque.
func (q *waitQueue) remove(s *seq) {
	if q.prio {
		if s.heapIdx >= 0 && s.heapIdx < len(q.h) && q.h[s.heapIdx] == s {
			heap.Remove(&q.h, s.heapIdx)
		}
		return
	}
	for i := q.head; i < len(q.d); i++ {
		if q.d[i] == s {
			copy(q.d[i:], q.d[i+1:])
			q.d[len(q.d)-1] = nil
			q.d = q.d[:len(q.d)-1]
			return
		}
	}
}

// seqHeap implements heap.Interface by (priority, arrival, order).
type seqHeap []*seq

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i].before(h[j]) }
func (h seqHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *seqHeap) Push(x any) {
	s := x.(*seq)
	s.heapIdx = len(*h)
	*h = append(*h, s)
}
func (h *seqHeap) Pop() any {
	old := *h
	n := len(old)
	s := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	s.heapIdx = -1
	return s
}
