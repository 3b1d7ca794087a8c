package dsl

import "testing"

// TestByteOrderMark: a model saved with a UTF-8 byte-order mark (Notepad and other Windows
// editors write one) loads, and positions in it are those an editor shows.
func TestByteOrderMark(t *testing.T) {
	src := "\ufeffmodel m\ninput x: f32[2, 3]\nforward {\n  loss sum(x)\n}\n"
	if _, err := Load("bom.ppm", []byte(src), Options{}); err != nil {
		t.Fatal(err)
	}
	names, err := Presets("bom.ppm", []byte("\ufeffmodel m\npreset a { }\ninput x: f32[2]\nforward {\n  loss sum(x)\n}\n"))
	if err != nil || len(names) != 1 || names[0] != "a" {
		t.Fatalf("presets %v: %v", names, err)
	}
	_, err = Load("bom.ppm", []byte("\ufeffmodel m\ninput x: f32[2, 3]\nforward {\n  loss sum(y)\n}\n"), Options{})
	if e := oneError(t, err); e.Loc.String() != "bom.ppm:4:12" {
		t.Fatalf("error at %s: %v", e.Loc, err)
	}
}
