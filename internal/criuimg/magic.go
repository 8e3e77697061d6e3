// Package criuimg holds the facts of CRIU's image format that both our
// page server (which writes images) and our lazy-pages server (which reads
// them) need: a CRIU image begins with two u32 magics, IMG_COMMON and the
// image's own (criu/image.c, criu/include/magic.h).
package criuimg

// Magics of criu/include/magic.h.
const (
	CommonMagic  = 0x54564319 // IMG_COMMON_MAGIC
	PagemapMagic = 0x56084025 // PAGEMAP_MAGIC
	MMMagic      = 0x57492820 // MM_MAGIC
)
