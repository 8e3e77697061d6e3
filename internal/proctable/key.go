package proctable

import (
	"cmp"
	"strconv"
	"strings"
)

// Key names a record: its owner and its name. Names are per owner: two
// users may each have a process of one name, and neither can take a name
// from the other.
type Key struct {
	UID  uint32
	Name string
}

// Key is r's key.
func (r Record) Key() Key { return Key{UID: r.Owner.UID, Name: r.Name} }

// String is "UID/NAME", unique among keys: for maps and locks, not for
// people (they see the owner's name).
func (k Key) String() string { return strconv.FormatUint(uint64(k.UID), 10) + "/" + k.Name }

// compareKeys orders keys by name, then owner: the records of one name,
// whoever owns them, are next to each other in a snapshot.
func compareKeys(a, b Key) int {
	if c := cmp.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return cmp.Compare(a.UID, b.UID)
}

// ParseKey reads back a key's String.
func ParseKey(s string) (Key, bool) {
	uid, name, ok := strings.Cut(s, "/")
	n, err := strconv.ParseUint(uid, 10, 32)
	if !ok || err != nil || name == "" {
		return Key{}, false
	}
	return Key{UID: uint32(n), Name: name}, true
}
