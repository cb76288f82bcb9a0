package dashboard

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// chart is a bar chart drawn as inline SVG by the templates: the sizes are computed here, in
// the SVG's own units.
type chart struct {
	Title, Note   string
	Width, Height int
	MidX          int
	ViewBox       string  // with room either side for the outer labels
	Baseline      float64 // y of the x axis
	Bars          []bar
	Empty         bool
}

type bar struct {
	X, Y, W, H   float64
	Label, Value string
	Tip          string
	Class        string
	LabelX       float64
}

const (
	chartWidth  = 560
	chartHeight = 190
	chartTop    = 18 // room for the value above the tallest bar
	chartBottom = 30 // room for the labels
)

// barChart lays out one bar per value; class names the bar's colour.
func barChart(title string, labels []string, values []int, valueText []string, tips []string, classes []string) chart {
	c := chart{Title: title, Width: chartWidth, Height: chartHeight, MidX: chartWidth / 2, ViewBox: fmt.Sprintf("-12 0 %d %d", chartWidth+24, chartHeight), Baseline: chartHeight - chartBottom}
	top := 0
	for _, v := range values {
		top = max(top, v)
	}
	c.Empty = top == 0
	slot := float64(chartWidth) / float64(len(values))
	w := slot * 0.72
	for i, v := range values {
		h := 0.0
		if top > 0 {
			h = float64(v) / float64(top) * (c.Baseline - chartTop)
			if v > 0 {
				h = max(h, 2) // a count is never invisible
			}
		}
		x := slot*float64(i) + (slot-w)/2
		c.Bars = append(c.Bars, bar{
			X: x, W: w, H: h, Y: c.Baseline - h, Label: labels[i], Value: valueText[i], Tip: tips[i],
			Class: classes[i], LabelX: x + w/2,
		})
	}
	return c
}

// dueChart plots the pending timeouts by when they are due.
func dueChart(counts []count) chart {
	labels, values, texts, tips, classes := make([]string, len(counts)), make([]int, len(counts)), make([]string, len(counts)), make([]string, len(counts)), make([]string, len(counts))
	partial := false
	for i, c := range counts {
		labels[i], values[i], texts[i] = c.Label, c.Count, compact(c.Count)
		tips[i] = fmt.Sprintf("%s: %s pending", c.Label, num(c.Count))
		classes[i] = "due"
		switch {
		case i == 0:
			classes[i] = "overdue"
		case c.AtLeast:
			texts[i], tips[i], classes[i] = "≥"+texts[i], tips[i]+" or more (beyond the sample)", "due partial"
			partial = true
		case c.AtMost:
			texts[i], tips[i], classes[i] = "≤"+texts[i], tips[i]+" or fewer (beyond the sample)", "due partial"
		}
	}
	ch := barChart("Pending by due time", labels, values, texts, tips, classes)
	if partial {
		ch.Note = "Pale dashed bars reach beyond the earliest timeouts read; their counts are bounds."
	}
	return ch
}

// axisLabels are the lateness buckets labelled on the axis: every bar's range is in its tooltip,
// and nineteen labels do not fit under it.
var axisLabels = map[float64]bool{.001: true, .01: true, .1: true, 1: true, 10: true, 60: true}

// latenessChart plots the forwarded messages by lateness.
func latenessChart(buckets []latenessBucket) chart {
	n := len(buckets)
	labels, values, texts, tips, classes := make([]string, n), make([]int, n), make([]string, n), make([]string, n), make([]string, n)
	prev := 0.0
	for i, b := range buckets {
		switch {
		case b.UpTo == 0:
			labels[i] = ">" + shortDuration(prev)
		case axisLabels[b.UpTo]:
			labels[i] = shortDuration(b.UpTo)
		}
		if b.UpTo != 0 {
			prev = b.UpTo
		}
		values[i], texts[i] = int(b.Count), compact(int(b.Count))
		tips[i] = fmt.Sprintf("%s delivered %s late", num(b.Count), latenessRange(buckets, i))
		classes[i] = "late"
		if b.UpTo == 0 || b.UpTo > 10 {
			classes[i] = "late slow"
		}
	}
	ch := barChart("Delivery lateness (since start)", labels, values, texts, tips, classes)
	return ch
}

func latenessRange(buckets []latenessBucket, i int) string {
	lo := 0.0
	if i > 0 {
		lo = buckets[i-1].UpTo
	}
	if buckets[i].UpTo == 0 {
		return "more than " + shortDuration(lo)
	}
	return shortDuration(lo) + "–" + shortDuration(buckets[i].UpTo)
}

// shortDuration writes seconds as the axis does: "1ms", "2.5s", "10m".
func shortDuration(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d == 0:
		return "0"
	case d < time.Second:
		return strconv.FormatFloat(s*1000, 'g', 3, 64) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(s, 'g', 3, 64) + "s"
	}
	return strconv.FormatFloat(s/60, 'g', 3, 64) + "m"
}

// compact writes a count in at most five characters: 999, 12.3k, 1.2M.
func compact(n int) string {
	switch {
	case n < 1000:
		return strconv.Itoa(n)
	case n < 100_000:
		return strconv.FormatFloat(float64(n)/1000, 'f', 1, 64) + "k"
	case n < 1_000_000:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
}

func slicesSort(s []string) { slices.Sort(s) }
