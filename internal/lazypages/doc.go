// Package lazypages is gpusched's own lazy-pages server: the page source
// of a lazy restore (CRIU's restore with lazy_pages, criu/uffd.c). CRIU's
// restore hands it, per restored process, the userfaultfd of the
// process's lazily restored mappings; the server answers the process's
// page faults from the snapshot's pages image and streams every other
// lazy page in with large O_DIRECT reads and UFFDIO_COPY once the
// processes run (the reads start as the server starts when the processes
// run only once every page is in: Options.ReadAhead); then it exits 0.
//
// It runs as a process of its own (the gpuschedd binary re-executed as
// ServerArgv0), so that it outlives the daemon: a page source that died
// with it would leave every page still out to be filled with zeros by the
// kernel (userfaultfd_release). The daemon side is Start.
package lazypages
