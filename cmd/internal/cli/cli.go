// Package cli is the command dispatcher of Tenantry's command-line tools,
// bin/tenantry (what an operator runs) and bin/tenantry-dev (the
// development tools): subcommands with their flags and positional
// arguments, their usage, and their exit codes.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// Command is one subcommand: its flags, and what it does with them.
type Command struct {
	Name    string
	Summary string
	// Args names its positional arguments in its usage ("NAME"); empty
	// for a command that takes none. Flags may come before or after them.
	Args  string
	NArgs int
	// Flags binds the command's flags to fs and returns what runs once
	// they are parsed, until ctx ends (at SIGINT or SIGTERM).
	Flags func(fs *flag.FlagSet) func(ctx context.Context, in Invocation) error
	// Exec, if set, runs in place of Flags with the command's arguments
	// as given, unparsed, and its result is the exit code: a command that
	// hands its arguments to another program.
	Exec func(args []string, stdout, stderr io.Writer) int
}

// Invocation is what a command runs with besides its flags.
type Invocation struct {
	// Args are its positional arguments, as many as Command.NArgs.
	Args []string
	// Out receives its output; errors go to the caller's stderr.
	Out io.Writer
}

// Program is a binary's commands.
type Program struct {
	// Name is the binary's name, in usage and errors.
	Name string
	// Commands are the listed commands, in the order of the list.
	Commands []Command
	// Hidden commands run, but are not listed: processes that a command
	// starts from this binary.
	Hidden []Command
	// Note, if set, ends the list of commands.
	Note string
}

// Run runs the command that args name with the rest of args, and returns
// the process's exit code: 0, 1 when the command failed, 2 when args are
// not a command's.
func (p Program) Run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		p.Usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	i := slices.IndexFunc(slices.Concat(p.Commands, p.Hidden), func(c Command) bool { return c.Name == args[0] })
	if i < 0 {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", p.Name, args[0])
		p.Usage(stderr)
		return 2
	}
	c := slices.Concat(p.Commands, p.Hidden)[i]
	if c.Exec != nil {
		return c.Exec(args[1:], stdout, stderr)
	}
	name := p.Name + " " + c.Name
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s %s [flags]\n\n%s\n\nFlags:\n", p.Name, strings.TrimSpace(c.Name+" "+c.Args), c.Summary)
		fs.PrintDefaults()
	}
	action := c.Flags(fs)
	// Flags before and after the positional arguments: the flag package
	// stops at the first argument, so parse what follows it.
	var positional []string
	for rest := args[1:]; ; rest = fs.Args()[1:] {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
	}
	switch {
	case len(positional) == c.NArgs:
	case c.NArgs == 0:
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", name, positional)
		return 2
	case len(positional) < c.NArgs:
		fmt.Fprintf(stderr, "%s: missing %s\n\n", name, c.Args)
		fs.Usage()
		return 2
	default:
		fmt.Fprintf(stderr, "%s: want %s, got %q\n", name, c.Args, positional)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := action(ctx, Invocation{Args: positional, Out: stdout}); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// Usage lists the commands.
func (p Program) Usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s <command> [flags]\n\nCommands:\n", p.Name)
	for _, c := range p.Commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.Name, c.Summary)
	}
	if p.Note != "" {
		fmt.Fprintf(w, "\n%s\n", p.Note)
	}
	fmt.Fprintf(w, "\nRun '%s <command> --help' for a command's flags.\n", p.Name)
}
