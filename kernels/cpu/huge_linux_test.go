package cpu

import (
	"os"
	"testing"
)

// The huge-page advice is accepted for a large buffer at any alignment (the 2 MiB pages
// inside it), skipped for small ones, and changes no value.
func TestHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("this kernel has no transparent huge pages:", err)
	}
	for _, off := range []int{0, 1, 1000} {
		buf := make([]float32, off+(6<<20)/4)
		s := buf[off:]
		if err := hugePages(s); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		for i := range s {
			s[i] = float32(i)
		}
		for i := range s {
			if s[i] != float32(i) {
				t.Fatalf("offset %d: s[%d] = %v", off, i, s[i])
			}
		}
	}
	if err := hugePages(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
}
