// Package store persists the daemon's state as one small JSON file per
// record, each written atomically (temp file, fsync, rename, directory
// fsync), so a crash at any point leaves either the old or the new record.
// Records that fail to decode are moved aside to quarantine, never allowed
// to block a boot.
package store
