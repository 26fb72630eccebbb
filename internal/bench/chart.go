package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// writeScaleChart draws the scale run as an SVG: the manager's live heap
// and the time until every VirtualCluster is Ready, each against the
// VirtualCluster count.
func writeScaleChart(path string, points []scalePoint) error {
	const panelW, panelH, pad = 420, 300, 60
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", 2*panelW, panelH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	panels := []struct {
		title, unit string
		value       func(scalePoint) float64
	}{
		{"live heap of bin/manager", "MiB", func(p scalePoint) float64 { return p.HeapMiB }},
		{"manager start to every VirtualCluster Ready", "s", func(p scalePoint) float64 { return p.ReadySeconds }},
	}
	maxX := float64(points[len(points)-1].Tenants)
	for i, panel := range panels {
		x0 := float64(i*panelW + pad)
		w, h := float64(panelW-pad-20), float64(panelH-2*pad)
		y0 := float64(pad) + h // the x axis
		maxY := 0.0
		for _, p := range points {
			maxY = math.Max(maxY, panel.value(p))
		}
		maxY = niceCeiling(maxY)
		fmt.Fprintf(&b, `<text x="%g" y="%d" font-size="14">%s (%s)</text>`+"\n", x0, pad-25, panel.title, panel.unit)
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", x0, y0, x0+w, y0)
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", x0, y0, x0, y0-h)
		for t := 0; t <= 4; t++ {
			y := y0 - h*float64(t)/4
			fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#ddd"/>`+"\n", x0, y, x0+w, y)
			fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end">%g</text>`+"\n", x0-6, y+4, maxY*float64(t)/4)
		}
		var line []string
		for _, p := range points {
			x := x0 + w*float64(p.Tenants)/maxX
			y := y0 - h*panel.value(p)/maxY
			line = append(line, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#1f77b4"/>`+"\n", x, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%d</text>`+"\n", x, y0+16, p.Tenants)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#1f77b4">%g</text>`+"\n", x, y-8, panel.value(p))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#1f77b4" stroke-width="2"/>`+"\n", strings.Join(line, " "))
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">VirtualClusters</text>`+"\n", x0+w/2, y0+36)
	}
	b.WriteString("</svg>\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// niceCeiling rounds v up to 1, 2 or 5 times a power of ten.
func niceCeiling(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
