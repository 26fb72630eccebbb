package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

var listCommand = cli.Command{
	Name: "list",
	Summary: "Print a table of the VirtualClusters: Ready and reason, the replica that runs each, its host namespaces, " +
		"its host copies by kind, the copies refused in the last hour, its lag, when a copy was last written, the last sync error, and its age.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		var host hostFlags
		host.bind(fs)
		return func(ctx context.Context, in cli.Invocation) error {
			c, err := host.client()
			if err != nil {
				return err
			}
			var list tenantryv1alpha1.VirtualClusterList
			if err := c.List(ctx, &list); err != nil {
				return fmt.Errorf("listing VirtualClusters: %w", err)
			}
			return printList(in.Out, list.Items, time.Now())
		}
	},
}

// printList writes the table of vcs, sorted by name, as of now.
func printList(out io.Writer, vcs []tenantryv1alpha1.VirtualCluster, now time.Time) error {
	slices.SortFunc(vcs, func(a, b tenantryv1alpha1.VirtualCluster) int { return strings.Compare(a.Name, b.Name) })
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tREADY\tREASON\tREPLICA\tHOST NAMESPACES\tSYNCED\tREFUSALS (1H)\tLAG\tLAST WRITE\tLAST ERROR\tAGE")
	for _, vc := range vcs {
		ready, reason := "Unknown", ""
		if c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady); c != nil {
			ready, reason = string(c.Status), c.Reason
		}
		namespaces, synced, refusals, lag, lastWrite, lastError := "-", "-", "-", "-", "-", "-"
		if s := vc.Status.Sync; s != nil {
			namespaces = fmt.Sprint(s.Objects["namespaces"])
			synced = syncedByKind(s.Objects)
			refusals = fmt.Sprint(s.Refusals)
			lag = s.Lag.Duration.String()
			if s.LastWriteTime != nil {
				lastWrite = ago(now, s.LastWriteTime.Time)
			}
			if e := s.LastError; e != nil {
				lastError = fmt.Sprintf("%s ago: %s %s: %s", duration.HumanDuration(now.Sub(e.Time.Time)), e.Resource, e.Object, oneLine(e.Message, 80))
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", vc.Name, ready, orDash(reason), orDash(vc.Status.Replica),
			namespaces, synced, refusals, lag, lastWrite, lastError, duration.HumanDuration(now.Sub(vc.CreationTimestamp.Time)))
	}
	return w.Flush()
}

// syncedByKind is "configmaps=3,pods=1", kinds with none left out, or
// "0".
func syncedByKind(objects map[string]int32) string {
	var parts []string
	for name, n := range objects {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, n))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func ago(now, t time.Time) string { return duration.HumanDuration(now.Sub(t)) + " ago" }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine is s on one line, cut to at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
