package lazypages

import (
	"sync"
	"sync/atomic"
	"time"
)

// Read-ahead: the background reads may start as the server starts, before
// the processes run, into a pool of aheadBytes; copies start only once
// they run (stream). aheadBytes bounds the server's memory whatever the
// image's size; it is about what one reader gets from this VM's disk
// during a restore (~60-80 MiB in ~200 ms; a pool of 128 MiB was never
// filled). How many reads are in flight meanwhile is the starter's choice
// (Options.ReadAhead): none for a lazy restore, whose processes' faults
// would wait behind them in the disk's queue once they run (with one,
// running again took longer; docs/disktier.md), all of them for a
// streamed one, whose processes run only once every page is in.
const aheadBytes = 64 << 20

// readAhead reads chunks of the pages images into its pool, in the order
// they are fed, ahead at a time until copying is closed and readers at a
// time after.
type readAhead struct {
	chunks  chan *chunk   // to read, closed once all are fed
	free    chan []byte   // buffers of readChunk bytes
	read    chan *chunk   // chunks read, closed once all are
	copying chan struct{} // closed when the copies start
	stop    chan struct{}
	errc    chan error // a read's failure

	readers, feeders sync.WaitGroup
	readNS, bytes    atomic.Int64
}

// newReadAhead allocates the pool and starts its readers. The pool is
// never unmapped: copies may read from it until the server exits.
func newReadAhead(ahead int) (*readAhead, error) {
	mem, err := alignedBuf(aheadBytes)
	if err != nil {
		return nil, err
	}
	n := aheadBytes / readChunk
	r := &readAhead{
		chunks:  make(chan *chunk),
		free:    make(chan []byte, n),
		read:    make(chan *chunk, n),
		copying: make(chan struct{}),
		stop:    make(chan struct{}),
		errc:    make(chan error, readers),
	}
	for i := range n {
		r.free <- mem[i*readChunk : (i+1)*readChunk : (i+1)*readChunk]
	}
	for i := range readers {
		r.readers.Go(func() {
			if i >= ahead {
				select {
				case <-r.copying:
				case <-r.stop:
					return
				}
			}
			r.reader()
		})
	}
	go func() {
		r.readers.Wait()
		close(r.read)
	}()
	return r, nil
}

// reader reads chunks into free buffers until the chunks run out.
func (r *readAhead) reader() {
	for c := range r.chunks {
		var b []byte
		select {
		case b = <-r.free:
		case <-r.stop:
			return
		}
		c.buf = b[:c.len]
		t := time.Now()
		if err := c.src.readAt(c.buf, c.off); err != nil {
			r.errc <- err
			return
		}
		r.readNS.Add(int64(time.Since(t)))
		r.bytes.Add(int64(c.len))
		select {
		case r.read <- c:
		case <-r.stop:
			return
		}
	}
}

// feed hands cs to the readers, in order; false when stopped.
func (r *readAhead) feed(cs []*chunk) bool {
	for _, c := range cs {
		select {
		case r.chunks <- c:
		case <-r.stop:
			return false
		}
	}
	return true
}

// close stops the readers and waits for them and the feeders.
func (r *readAhead) close() {
	close(r.stop)
	r.feeders.Wait()
	r.readers.Wait()
}
