package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// newTransport is a model's HTTP transport: loopback only, connections
// kept for reuse while the model is held and closed when it is let go (a
// hibernate closes the server's established connections, and a kept one
// would then fail the next request sent on it).
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // a model may think for minutes before its first byte
		// Pass the client's Accept-Encoding as it is: no gzip asked for
		// the client and undone here.
		DisableCompression: true,
	}
}

// proxyKey carries the request's lease to the proxy's hooks.
type proxyKey struct{}

// newProxy forwards requests to m's server. Event streams, and replies of
// unknown length that bufferReply passes on streaming, are flushed at each
// write (ReverseProxy does so for text/event-stream and for a
// ContentLength of -1: server-sent events pass chunk by chunk); a client
// that hangs up cancels the upstream request (the outgoing request
// carries the client's context).
func (r *Router) newProxy(mm *model) *httputil.ReverseProxy {
	m := mm.cfg
	target := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(m.Port)}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if wb, ok := pr.In.Body.(wholeBody); ok && pr.Out.Body != nil {
				// In memory, as the transport can tell: it writes the
				// headers and the body in one segment. Behind
				// ReverseProxy's own wrapper it would flush the headers
				// first, a segment and a wake of the server more.
				pr.Out.Body = io.NopCloser(bytes.NewReader(wb.b))
			}
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Del("Authorization") // the router's key, not the model's
			pr.Out.Header.Del("X-Api-Key")
			if k := r.cfg.ModelKey; k != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+k)
			}
		},
		Transport:  mm.transport,
		BufferPool: copyBuffers,
		ModifyResponse: func(resp *http.Response) error {
			l, _ := resp.Request.Context().Value(proxyKey{}).(*lease)
			if l == nil {
				return nil
			}
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				resp.Body = &sseBody{ReadCloser: resp.Body, l: l, ctx: resp.Request.Context()}
				return nil
			}
			whole, err := bufferReply(resp)
			if whole {
				l.giveSlotBack() // the server is done: the client's pace is its own
			}
			return err
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if wasCut(req.Context()) {
				writeError(w, req, http.StatusServiceUnavailable, "turn_over", cutMessage(req.Context(), m.Name, r.cfg.TurnTimeout))
				return
			}
			if req.Context().Err() != nil {
				return // the client hung up: nobody to answer
			}
			if l, _ := req.Context().Value(proxyKey{}).(*lease); l != nil {
				l.fail()
			}
			r.metrics.upstreamErrs.WithLabelValues(m.Name).Inc()
			writeError(w, req, http.StatusBadGateway, "upstream_error",
				fmt.Sprintf("model %q: its server failed the request (%v); the next request starts it again if it exited", m.Name, err))
		},
		ErrorLog: r.stdLog,
	}
}

// maxBuffered bounds the part of a reply that is not an event stream
// read before it is passed on.
const maxBuffered = 16 << 20

// preallocMax bounds what a declared Content-Length has allocated before
// the bytes arrive (request bodies and replies): a longer body grows as
// it is read.
const preallocMax = 64 << 10

// bufferReply reads a reply that is not an event stream (a JSON answer is
// of no use until whole) before passing it on, up to maxBuffered: a server
// that dies mid-reply then gives the client a clear 502 rather than a 200
// cut short. A longer reply passes its first maxBuffered bytes and streams
// the rest. whole says whether the reply was read to its end.
func bufferReply(resp *http.Response) (whole bool, err error) {
	var head []byte
	if n := resp.ContentLength; n >= 0 && n <= preallocMax {
		// The usual case: a short reply of known length, read in one
		// allocation.
		head = make([]byte, n)
		_, err = io.ReadFull(resp.Body, head)
	} else {
		head, err = io.ReadAll(io.LimitReader(resp.Body, maxBuffered))
	}
	if err != nil {
		resp.Body.Close()
		return false, fmt.Errorf("reading its reply: %w", err)
	}
	if len(head) < maxBuffered {
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(head))
		resp.ContentLength = int64(len(head))
		resp.Header.Set("Content-Length", strconv.Itoa(len(head)))
		resp.TransferEncoding = nil
		return true, nil
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return false, nil
}

// wholeBody is a request body already read whole (routeByBody's).
type wholeBody struct {
	*bytes.Reader
	b []byte
}

func newWholeBody(b []byte) wholeBody { return wholeBody{bytes.NewReader(b), b} }

func (wholeBody) Close() error { return nil }

// copyBuffers are ReverseProxy's copy buffers, reused: it would allocate
// 32 KiB per request.
var copyBuffers = &bufferPool{pool: sync.Pool{New: func() any { return new([32 << 10]byte) }}}

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte  { return p.pool.Get().(*[32 << 10]byte)[:] }
func (p *bufferPool) Put(b []byte) { p.pool.Put((*[32 << 10]byte)(b)) }

// sseBody ends an event stream that breaks mid-way with an error event the
// client can read, instead of a bare cut, and marks the lease failed.
type sseBody struct {
	io.ReadCloser
	l    *lease
	ctx  context.Context // the upstream request's: its cause says a turn's end cut it
	tail *strings.Reader
}

func (b *sseBody) Read(p []byte) (int, error) {
	if b.tail != nil {
		return b.tail.Read(p)
	}
	n, err := b.ReadCloser.Read(p)
	if err == nil || errors.Is(err, io.EOF) {
		return n, err
	}
	if wasCut(b.ctx) {
		msg := cutMessage(b.ctx, b.l.m.cfg.Name, b.l.r.cfg.TurnTimeout)
		b.tail = strings.NewReader("\n\nevent: error\ndata: " + errorJSON(false, "turn_over", msg) + "\n\n")
		return n, nil
	}
	b.l.fail()
	b.l.r.metrics.upstreamErrs.WithLabelValues(b.l.m.cfg.Name).Inc()
	msg := fmt.Sprintf("model %q: its server failed mid-stream (%v)", b.l.m.cfg.Name, err)
	b.tail = strings.NewReader("\n\nevent: error\ndata: " + errorJSON(false, "upstream_error", msg) + "\n\n")
	return n, nil
}

// fail marks the lease's model broken: no more requests go to this hold.
func (l *lease) fail() {
	l.r.mu.Lock()
	l.failed = true
	l.r.mu.Unlock()
}
