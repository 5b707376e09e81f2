// Command infer runs Hugging Face checkpoints (Llama, Qwen2, Qwen3, Mistral,
// Mixtral, Qwen3-MoE; BF16 or FP8) with FlexTensor.
//
//	infer run-model [flags]     generate from a prompt of token ids
//
// Exit codes: 0 success, 1 runtime error, 2 usage error, 130 interrupted
// (SIGINT), 143 terminated (SIGTERM).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// errInterrupted is returned when SIGINT or SIGTERM stopped a command (exit 130).
var errInterrupted = errors.New("interrupted")

// command is one subcommand.
type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
	// define adds the command's flags to a flag set (used to learn every
	// flag name for the FT_* environment variables).
	define func(fs *pflag.FlagSet)
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain is main without the exit, for tests.
func runMain(args []string, stdout, stderr io.Writer) int {
	helpOut = stdout
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "version" {
		printVersion(stdout)
		return 0
	}
	if args[0] == "help" {
		switch len(args) {
		case 1:
			printUsage(stdout)
			return 0
		case 2:
			if _, ok := commands[args[1]]; ok {
				return runMain([]string{args[1], "--help"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "infer help: unknown command %q\n\n", args[1])
			printUsage(stderr)
			return 2
		}
		fmt.Fprintf(stderr, "infer help: give one command (infer help run-model)\n")
		return 2
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "infer: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	sig := watchSignals(stderr, c.name)
	defer sig.stop()
	err := c.run(args[1:], stdout, stderr)
	endProgress()
	if err != nil && sig.signal() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, errInterrupted)) {
		err = fmt.Errorf("%w", errInterrupted) // however the phase reported it
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.Is(err, errInterrupted):
		code, what := 130, "interrupted"
		if sig.signal() != nil {
			code, what = sig.code(), sig.describe()
		}
		if err.Error() != errInterrupted.Error() {
			fmt.Fprintf(stderr, "infer %s: %s: %v\n", c.name, what, err)
			return code
		}
		fmt.Fprintf(stderr, "infer %s: %s; device and pinned memory released, temporary files removed\n", c.name, what)
		return code
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "infer %s: %v\nRun 'infer %s --help' for usage.\n", c.name, err, c.name)
		return 2
	default:
		fmt.Fprintf(stderr, "infer %s: %v\n", c.name, err)
		return 1
	}
}

// helpOut is where --help output goes: stdout, as for 'infer --help'.
var helpOut io.Writer = os.Stdout

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "infer runs Hugging Face checkpoints (Llama, Qwen2, Qwen3, Mistral, Mixtral,\nQwen3-MoE; BF16 or FP8) with FlexTensor.\n\nUsage:\n  infer <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, `
Every flag can also come from an environment variable FT_<FLAG> (dashes as
underscores: FT_GPU_BUDGET=8GiB) or from a JSON config file named by --config
or FT_CONFIG ({"device": "cuda:0", "run-model": {"max-new-tokens": 64}}).
The command line wins over the environment, which wins over the file.

Exit codes: 0 success, 1 runtime error (out of memory included), 2 usage
error, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).

Run 'infer <command> --help' or 'infer help <command>' for a command's flags
and examples; 'infer --version' for the version, commit and CUDA support.`)
}

// newFlags returns a flag set that reports errors instead of exiting, with a
// usage text of the command's examples and flags.
func newFlags(name, usage string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.String("config", "", "JSON file of default flag values (see 'infer --help'); also FT_CONFIG")
	fs.Usage = func() {
		fmt.Fprintf(helpOut, "%s\n\nFlags:\n%s", strings.TrimSpace(usage), fs.FlagUsages())
	}
	return fs
}

// parseFlags parses args, turning flag errors into usage errors.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return applyDefaults(fs, fs.Name())
}
