package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The chart is plain SVG 1.1: no script, no style sheet, no font or image
// to fetch (the generic sans-serif family only), an opaque background for
// GitHub's dark mode, and width and height set, so that it renders the
// same from a file, in a browser and as an <img> in a README.

// The layout, in SVG user units (pixels at 100%).
const (
	chartWidth = 1000
	plotTop    = 110 // top of both plot areas
	plotW      = 380
	plotH      = 280
	leftPlotX  = 90  // left edge of the throughput plot
	rightPlotX = 590 // left edge of the CPU plot
	plotPad    = 18  // between the plot's frame and its first and last size
	plotPadY   = 10  // between the plot's frame and its lowest and highest tick
	legendY    = plotTop + plotH + 66
	noteTop    = legendY + 34
	noteStep   = 16
	noteChars  = 165 // a footnote line's length before it wraps
)

// chartPanel is one of the two plots: a figure of each series against
// message size.
type chartPanel struct {
	x      float64 // left edge of the plot area
	title  string
	yLabel string
	unit   string // in the points' tooltips
	values func(chartSeries) []float64
}

// seriesStyle is how one stack's line and markers look in both panels.
type seriesStyle struct {
	color string
	dash  string // stroke-dasharray, "" for solid
	shape int    // marker: circle, square, triangle, diamond
}

// The stacks of the default -stacks have fixed colours, so that charts
// made at different times compare at a glance; raw, the floor, is grey
// and dashed.
var (
	stackColors = map[string]string{stackLean: "#1f77b4", stackGrpc: "#ff7f0e", stackRaw: "#555555"}
	otherColors = []string{"#2ca02c", "#9467bd", "#d62728", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}
)

func (d *chartData) styles() []seriesStyle {
	out := make([]seriesStyle, len(d.series))
	other := 0
	for i, s := range d.series {
		st := seriesStyle{color: stackColors[s.name], shape: i % 4}
		if st.color == "" {
			st.color = otherColors[other%len(otherColors)]
			other++
		}
		if s.name == stackRaw {
			st.dash = "6 4"
		}
		out[i] = st
	}
	return out
}

// writeSVG writes the chart: the title lines, the two panels side by side,
// the legend below them and the footnotes.
func (d *chartData) writeSVG(b *strings.Builder) {
	var notes []string
	for _, n := range d.notes {
		notes = append(notes, wrapLine(n, noteChars)...)
	}
	height := noteTop + noteStep*len(notes)
	fmt.Fprintf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	fmt.Fprintf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(b, "<title>%s</title>\n", esc(d.title))
	fmt.Fprintf(b, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", chartWidth, height)
	svgText(b, 20, 26, `font-size="16" font-weight="bold"`, d.title)
	svgText(b, 20, 47, "", d.machine)
	svgText(b, 20, 66, `fill="#444444"`, d.detail)
	styles := d.styles()
	for _, p := range []chartPanel{
		{x: leftPlotX, title: "Throughput (higher is better)", yLabel: "MB/s, request + response payload", unit: "MB/s",
			values: func(s chartSeries) []float64 { return s.mbPerSec }},
		{x: rightPlotX, title: "CPU per MB (lower is better)", yLabel: "CPU µs per MB, client + server", unit: "µs CPU/MB",
			values: func(s chartSeries) []float64 { return s.cpuPerMB }},
	} {
		d.writePanel(b, p, styles)
	}
	d.writeLegend(b, styles)
	for i, n := range notes {
		svgText(b, 20, float64(noteTop+i*noteStep), `font-size="11" fill="#444444"`, n)
	}
	b.WriteString("</svg>\n")
}

// writePanel writes one plot: grid, ticks, axis titles, and one polyline
// with markers per series. A series has a polyline even when it has no
// point, so that every panel holds one per stack.
func (d *chartData) writePanel(b *strings.Builder, p chartPanel, styles []seriesStyle) {
	var all []float64
	for _, s := range d.series {
		all = append(all, p.values(s)...)
	}
	lo, hi, ticks := logAxis(all)
	logLo, logSpan := math.Log10(lo), math.Log10(hi)-math.Log10(lo)
	yOf := func(v float64) float64 {
		return plotTop + plotH - plotPadY - (math.Log10(v)-logLo)/logSpan*(plotH-2*plotPadY)
	}
	xOf := d.sizeScale(p.x)
	bottom := float64(plotTop + plotH)

	b.WriteString("<g>\n")
	svgText(b, p.x+plotW/2, plotTop-12, `text-anchor="middle" font-size="14" font-weight="bold"`, p.title)
	for _, t := range ticks {
		y := yOf(t)
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", p.x, y, p.x+plotW, y)
		svgText(b, p.x-6, y+4, `text-anchor="end" font-size="11"`, tickLabel(t))
	}
	for i, n := range d.sizes {
		x := xOf(i)
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", x, plotTop, x, bottom)
		svgText(b, x, bottom+17, `text-anchor="middle" font-size="11"`, chartSizeLabel(n))
	}
	fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888888\"/>\n", p.x, plotTop, plotW, plotH)
	svgText(b, p.x+plotW/2, bottom+38, `text-anchor="middle"`, "message size (request = response), log scale")
	yx, yy := p.x-52, float64(plotTop+plotH/2)
	svgText(b, yx, yy, fmt.Sprintf(`text-anchor="middle" transform="rotate(-90 %.1f %.1f)"`, yx, yy), p.yLabel+", log scale")

	for si, s := range d.series {
		st := styles[si]
		vs := p.values(s)
		var pts []string
		for i, v := range vs {
			if v > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(i), yOf(v)))
			}
		}
		dash := ""
		if st.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, st.dash)
		}
		fmt.Fprintf(b, "<polyline data-stack=\"%s\" points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
			esc(s.name), strings.Join(pts, " "), st.color, dash)
		for i, v := range vs {
			if v > 0 {
				tip := fmt.Sprintf("%s, %s: %.4g %s", s.name, chartSizeLabel(d.sizes[i]), v, p.unit)
				svgMarker(b, st, xOf(i), yOf(v), tip)
			}
		}
	}
	b.WriteString("</g>\n")
}

// sizeScale returns the x coordinate of each size in the panel whose plot
// starts at left: log scale, the first and last sizes plotPad inside the
// frame, a lone size in the middle.
func (d *chartData) sizeScale(left float64) func(i int) float64 {
	n := len(d.sizes)
	if n < 2 || d.sizes[0] == d.sizes[n-1] {
		return func(int) float64 { return left + plotW/2 }
	}
	l0 := math.Log2(float64(d.sizes[0]))
	span := math.Log2(float64(d.sizes[n-1])) - l0
	return func(i int) float64 {
		return left + plotPad + (math.Log2(float64(d.sizes[i]))-l0)/span*(plotW-2*plotPad)
	}
}

// writeLegend writes one entry per stack, centred below both panels: a
// stretch of its line with its marker, and its name.
func (d *chartData) writeLegend(b *strings.Builder, styles []seriesStyle) {
	// The generic sans-serif font's width is unknown: about 7 units per
	// character at size 12.
	width := func(name string) float64 { return 40 + 7*float64(len([]rune(name))) + 24 }
	total := 0.0
	for _, s := range d.series {
		total += width(s.name)
	}
	x := max((chartWidth-total)/2, 20)
	b.WriteString("<g>\n")
	for i, s := range d.series {
		st := styles[i]
		dash := ""
		if st.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, st.dash)
		}
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
			x, legendY-4, x+32, legendY-4, st.color, dash)
		svgMarker(b, st, x+16, legendY-4, "")
		svgText(b, x+40, legendY, "", s.name)
		x += width(s.name)
	}
	b.WriteString("</g>\n")
}

// svgMarker writes a point's marker at (x, y), with tip as its tooltip
// when not "".
func svgMarker(b *strings.Builder, st seriesStyle, x, y float64, tip string) {
	var el string
	switch st.shape {
	case 0:
		el = fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="4.5"`, x, y)
	case 1:
		el = fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="8" height="8"`, x-4, y-4)
	case 2:
		el = fmt.Sprintf(`<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f"`, x, y-5.5, x+5, y+3.5, x-5, y+3.5)
	default:
		el = fmt.Sprintf(`<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f"`, x, y-5.5, x+5.5, y, x, y+5.5, x-5.5, y)
	}
	el += fmt.Sprintf(` fill="%s" stroke="#ffffff" stroke-width="1"`, st.color)
	if tip == "" {
		b.WriteString(el + "/>\n")
		return
	}
	name, _, _ := strings.Cut(el[1:], " ")
	fmt.Fprintf(b, "%s><title>%s</title></%s>\n", el, esc(tip), name)
}

// svgText writes s at (x, y) with the extra attributes attrs.
func svgText(b *strings.Builder, x, y float64, attrs, s string) {
	if attrs != "" {
		attrs = " " + attrs
	}
	fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\"%s>%s</text>\n", x, y, attrs, esc(s))
}

var svgEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

// esc escapes s for SVG text and attribute values.
func esc(s string) string { return svgEscaper.Replace(s) }

// logAxis returns the range [lo, hi] of a log-scale axis that holds the
// positive values of vs, and its ticks: the powers of ten when the values
// span more than three decades, else 1, 2 and 5 times them, with lo and hi
// rounded out to ticks. Without a positive value it is 1 to 10.
func logAxis(vs []float64) (lo, hi float64, ticks []float64) {
	mn, mx := math.Inf(1), 0.0
	for _, v := range vs {
		if v > 0 && !math.IsInf(v, 0) {
			mn, mx = min(mn, v), max(mx, v)
		}
	}
	if mx == 0 {
		return 1, 10, []float64{1, 10}
	}
	steps := []int{1, 2, 5}
	if mx/mn > 1000 {
		steps = []int{1}
	}
	// A tick is step × 10^k; rank counts them upwards.
	tick := func(rank int) float64 {
		k, i := floorDiv(rank, len(steps))
		return scaled(steps[i], k)
	}
	rankBelow := func(v float64) int { // the highest rank at or below v
		k := int(math.Floor(math.Log10(v)))
		r := k*len(steps) + len(steps) - 1
		for tick(r) > v*(1+1e-9) {
			r--
		}
		for tick(r+1) <= v*(1+1e-9) {
			r++
		}
		return r
	}
	rlo := rankBelow(mn)
	rhi := rankBelow(mx)
	if tick(rhi) < mx*(1-1e-9) || rhi == rlo {
		rhi++
	}
	for r := rlo; r <= rhi; r++ {
		ticks = append(ticks, tick(r))
	}
	return tick(rlo), tick(rhi), ticks
}

// floorDiv returns the quotient and remainder of a/b rounded towards
// minus infinity, for b > 0.
func floorDiv(a, b int) (q, r int) {
	q, r = a/b, a%b
	if r < 0 {
		q, r = q-1, r+b
	}
	return q, r
}

// scaled returns s × 10^k, as close to its decimal value as a float64 gets.
func scaled(s, k int) float64 {
	if k < 0 {
		return float64(s) / math.Pow10(-k)
	}
	return float64(s) * math.Pow10(k)
}

// tickLabel writes an axis value: 0.05, 200, 5000, 20k, 1M.
func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// wrapLine breaks s at spaces into lines of at most n characters (a word
// longer than n gets a line of its own).
func wrapLine(s string, n int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) <= n:
			line += " " + w
		default:
			lines = append(lines, line)
			line = "    " + w // continuation lines are indented
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
