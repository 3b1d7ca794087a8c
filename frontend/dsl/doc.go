// Package dsl owns ppc's model language (.ppm files): the participle grammar, kept inside this
// package, and its lowering to ir in a separate step.
package dsl
