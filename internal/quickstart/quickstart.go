// Package quickstart finds README.md's quick start, the shell block the
// tests run as written (against the binary, and against the image).
package quickstart

import (
	"errors"
	"strings"
)

const (
	begin = "<!-- quickstart:begin -->\n```sh\n"
	end   = "```\n<!-- quickstart:end -->"
)

// Block returns the shell block between the quickstart markers of a
// README.
func Block(readme string) (string, error) {
	_, rest, ok := strings.Cut(readme, begin)
	if !ok {
		return "", errors.New("README.md has no <!-- quickstart:begin --> ```sh marker")
	}
	block, _, ok := strings.Cut(rest, end)
	if !ok {
		return "", errors.New("README.md: quickstart:begin without quickstart:end")
	}
	return block, nil
}
