package memory

import "errors"

var errClosed = errors.New("memory: store is closed")

// claimQueue is a container/heap of entries ordered by when they become claimable, then by due
// time, so that ClaimDue hands out the earliest first.
type claimQueue []*entry

func (q claimQueue) Len() int { return len(q) }

func (q claimQueue) Less(i, j int) bool {
	if c := q[i].availableAt.Compare(q[j].availableAt); c != 0 {
		return c < 0
	}
	return q[i].timeout.Due.Before(q[j].timeout.Due)
}

func (q claimQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}

func (q *claimQueue) Push(x any) {
	e := x.(*entry)
	e.index = len(*q)
	*q = append(*q, e)
}

func (q *claimQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	e.index = -1
	return e
}
