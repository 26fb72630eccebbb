package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one row of the results table.
type result struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	Note   string  `json:"note,omitempty"`
}

// report is what a bench run writes.
type report struct {
	Date    string   `json:"date"`
	Command string   `json:"command"`
	Machine string   `json:"machine"`
	Results []result `json:"results"`
	// Scale holds the scale run's figures at each VirtualCluster count.
	Scale []scalePoint `json:"scale,omitempty"`
}

func ms(name string, d time.Duration, target, note string) result {
	r := result{Name: name, Value: round(float64(d)/float64(time.Millisecond), 1), Unit: "ms", Target: target, Note: note}
	if target != "" {
		var limit float64
		if _, err := fmt.Sscanf(target, "<= %g ms", &limit); err == nil {
			r.Met = ptrBool(r.Value <= limit)
		}
	}
	return r
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

func ptrBool(b bool) *bool { return &b }

func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				model = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(strings.SplitN(string(data), "\n", 2)[0], "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %d GiB", (kb+(1<<19))>>20)
		}
	}
	return fmt.Sprintf("%d cores (%s)%s, %s %s/%s", runtime.NumCPU(), model, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func (r report) table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tVALUE\tTARGET\tMET\tNOTE")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.Name, x.value(), x.Target, x.met(), x.Note)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "\nMachine: %s\n", r.Machine)
	return b.String()
}

func (r report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark results\n\n%s, `%s`, on %s.\n\n", r.Date, r.Command, r.Machine)
	fmt.Fprintln(&b, "| measure | value | target | met | note |\n| --- | --- | --- | --- | --- |")
	for _, x := range r.Results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", x.Name, x.value(), x.Target, x.met(), x.Note)
	}
	return b.String()
}

func (r report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown()), 0o644)
}

func (x result) value() string {
	return strings.TrimSpace(fmt.Sprintf("%g %s", x.Value, x.Unit))
}

func (x result) met() string {
	switch {
	case x.Met == nil:
		return ""
	case *x.Met:
		return "yes"
	}
	return "NO"
}
