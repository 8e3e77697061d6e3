package limits

import "testing"

// TestBytesShares: a uid is held to its share and everyone to the total;
// a refusal holds nothing; a release, given twice, gives back once.
func TestBytesShares(t *testing.T) {
	b := NewBytes(100, 40)
	r1, err := b.Take(1000, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Take(1000, 11); err != ErrBytesFull {
		t.Fatalf("past the share: %v", err)
	}
	r2, err := b.Take(1000, 10)
	if err != nil {
		t.Fatalf("up to the share: %v", err)
	}
	if _, err := b.Take(1001, 40); err != nil {
		t.Fatalf("another uid: %v", err)
	}
	if _, err := b.Take(1002, 21); err != ErrBytesFull {
		t.Fatalf("past the total (80 held): %v", err)
	}
	r1()
	r1()
	r2()
	if _, err := b.Take(1000, 40); err != nil {
		t.Fatalf("after giving back: %v", err)
	}
	if _, err := b.Take(1002, 21); err != ErrBytesFull {
		t.Fatalf("a double release gave back twice: %v", err)
	}
}
