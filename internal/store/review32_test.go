package store

import "testing"

// Setup: NameGlob with a character class whose range spans "/" (0x2F):
// "team[.-0]x", "[!-0]*" (path.Match syntax, which NameGlob documents).
// Wrong: the class does not match "/" in a name, because the name's "/" is
// swapped for a NUL byte before matching while the range is left as it
// is: path.Match("team[.-0]x", "team/x") is true, NameGlob's is false.
// Fix: map "/" to NUL in ranges too, or match the name against the class
// by hand; at least document it.
func TestReview32NameGlobRangeSpanningSlash(t *testing.T) {
	for _, tc := range []struct{ pattern, name string }{
		{"team[.-0]x", "team/x"},
		{"[!-0]*", "/a"},
	} {
		match, err := NameGlob(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if !match(tc.name) {
			t.Errorf("NameGlob(%q) does not match %q", tc.pattern, tc.name)
		}
	}
}
