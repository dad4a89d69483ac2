package main

import (
	"errors"
	"flag"
	"fmt"
)

// newFlagSet is a subcommand's flag set: its problems go to stderr, and -h prints usage and then
// the flags' defaults.
func newFlagSet(e env, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs. When ok is false the command ends with code: exitOK for -h,
// exitUsage for a bad flag (the flag package has printed the problem and the usage).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return exitOK, true
}

// parseFlagsOnly is parseFlags for a command that takes flags only: an argument ends it with
// exitUsage and a line naming the argument.
func parseFlagsOnly(e env, fs *flag.FlagSet, args []string) (code int, ok bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return code, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "idemguard %s: unexpected argument %q; it takes flags only\n", fs.Name(), fs.Arg(0))
		return exitUsage, false
	}
	return exitOK, true
}
