// Command notimeoutmill is a program that is not timeoutmill, for the tests' refusals.
package main

import "fmt"

func main() { fmt.Println("not timeoutmill") }
