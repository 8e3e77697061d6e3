// Package archtest holds no code: its tests enforce the import rules of
// DESIGN.md and STYLE.md (who may import whom) and that every package says
// what it owns in a doc comment.
package archtest
