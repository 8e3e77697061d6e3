// Package listing bounds what one record costs in a listing reply: Cut
// shortens a command to a number of bytes as encoding/json writes it, so
// that a reply of n records is bounded by n, whatever the commands kept.
package listing
