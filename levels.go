package prioq

// Levels is the layout for a small fixed set of priorities 0 … n-1 (n ≤ 64), one
// Redis list (a lane) per level. Push and pop are O(1). Priority n-1 is served
// first; messages of one priority are served first in, first out.
func Levels(n int) Layout { return Layout{kind: kindLevels, levels: n} }
