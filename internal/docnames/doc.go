// Package docnames holds a test that the documents walking through the code (docs/architecture.md)
// name only identifiers, files and header names the code has, so they cannot drift silently.
package docnames
