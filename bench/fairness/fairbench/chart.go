package fairbench

import (
	"bufio"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one line of a chart panel.
type Series struct {
	// Name is the series' legend entry.
	Name string
	// X and Y are the points, in order of X.
	X, Y []float64
	// Step draws a step function (CDFs) instead of straight segments.
	Step bool
}

// Panel is one plot of a chart: axes, lines and a legend.
type Panel struct {
	// Title is drawn above the plot.
	Title string
	// XLabel and YLabel name the axes.
	XLabel, YLabel string
	// Series are the lines, drawn in palette order.
	Series []Series
	// LogX draws the x axis on a log10 scale (values <= 0 are clipped to
	// the smallest positive value).
	LogX bool
	// YMax, if > 0, fixes the top of the y axis.
	YMax float64
}

// Chart geometry in pixels.
const (
	chartWidth   = 900
	panelHeight  = 250
	marginLeft   = 70
	marginRight  = 150
	marginTop    = 24
	marginBottom = 36
)

// palette holds distinguishable line colours (Okabe–Ito plus black).
var palette = []color.RGBA{
	{0, 114, 178, 255}, {213, 94, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255},
	{230, 159, 0, 255}, {86, 180, 233, 255}, {0, 0, 0, 255}, {240, 228, 66, 255},
}

// WriteChart draws the panels one above the other under a title and writes
// a PNG to path. The output depends only on its arguments.
func WriteChart(path, title string, panels []Panel) error {
	h := 20 + len(panels)*panelHeight
	img := image.NewRGBA(image.Rect(0, 0, chartWidth, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	drawText(img, 8, 14, title, color.Black)
	for i, p := range panels {
		drawPanel(img, image.Rect(0, 20+i*panelHeight, chartWidth, 20+(i+1)*panelHeight), p)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	w := bufio.NewWriter(f)
	if err := png.Encode(w, img); err != nil {
		f.Close()
		return fmt.Errorf("chart %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return f.Close()
}

func drawPanel(img *image.RGBA, r image.Rectangle, p Panel) {
	plot := image.Rect(r.Min.X+marginLeft, r.Min.Y+marginTop, r.Max.X-marginRight, r.Max.Y-marginBottom)
	drawText(img, plot.Min.X, r.Min.Y+16, p.Title, color.Black)
	// Data range.
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymax := 0.0
	minPos := math.Inf(1)
	for _, s := range p.Series {
		for i, x := range s.X {
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymax = math.Max(ymax, s.Y[i])
			if x > 0 {
				minPos = math.Min(minPos, x)
			}
		}
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 0, 1
	}
	if p.YMax > 0 {
		ymax = p.YMax
	}
	if ymax <= 0 {
		ymax = 1
	}
	var ticksX []float64
	tx := func(x float64) float64 { return x }
	if p.LogX {
		if math.IsInf(minPos, 0) {
			minPos = 1e-3
		}
		lo := math.Floor(math.Log10(minPos))
		hi := math.Ceil(math.Log10(math.Max(xmax, minPos*10)))
		if hi <= lo {
			hi = lo + 1
		}
		xmin, xmax = lo, hi
		tx = func(x float64) float64 {
			if x < minPos {
				x = minPos
			}
			return math.Log10(x)
		}
		for e := lo; e <= hi; e++ {
			ticksX = append(ticksX, e)
		}
	} else {
		if xmax <= xmin {
			xmax = xmin + 1
		}
		ticksX = niceTicks(xmin, xmax)
	}
	ymax = niceCeil(ymax)
	ticksY := niceTicks(0, ymax)
	px := func(x float64) float64 {
		return float64(plot.Min.X) + (tx(x)-xmin)/(xmax-xmin)*float64(plot.Dx())
	}
	pxRaw := func(v float64) float64 { // v already on the axis scale
		return float64(plot.Min.X) + (v-xmin)/(xmax-xmin)*float64(plot.Dx())
	}
	py := func(y float64) float64 {
		return float64(plot.Max.Y) - y/ymax*float64(plot.Dy())
	}
	grid := color.RGBA{225, 225, 225, 255}
	for _, t := range ticksY {
		y := int(math.Round(py(t)))
		hline(img, plot.Min.X, plot.Max.X, y, grid)
		lbl := fmtTick(t)
		drawText(img, plot.Min.X-6-7*len(lbl), y+4, lbl, color.Black)
	}
	for _, t := range ticksX {
		x := int(math.Round(pxRaw(t)))
		vline(img, x, plot.Min.Y, plot.Max.Y, grid)
		lbl := fmtTick(t)
		if p.LogX {
			lbl = fmtTick(math.Pow(10, t))
		}
		drawText(img, x-7*len(lbl)/2, plot.Max.Y+14, lbl, color.Black)
	}
	axis := color.RGBA{60, 60, 60, 255}
	hline(img, plot.Min.X, plot.Max.X, plot.Max.Y, axis)
	vline(img, plot.Min.X, plot.Min.Y, plot.Max.Y, axis)
	drawText(img, plot.Min.X+plot.Dx()/2-7*len(p.XLabel)/2, plot.Max.Y+30, p.XLabel, color.Black)
	drawText(img, r.Min.X+4, plot.Min.Y-6, p.YLabel, color.Black)
	for i, s := range p.Series {
		c := palette[i%len(palette)]
		for k := 1; k < len(s.X); k++ {
			x0, y0 := px(s.X[k-1]), py(math.Min(s.Y[k-1], ymax))
			x1, y1 := px(s.X[k]), py(math.Min(s.Y[k], ymax))
			if s.Step {
				line(img, plot, x0, y0, x1, y0, c)
				line(img, plot, x1, y0, x1, y1, c)
			} else {
				line(img, plot, x0, y0, x1, y1, c)
			}
		}
		if len(s.X) == 1 {
			line(img, plot, px(s.X[0])-2, py(s.Y[0]), px(s.X[0])+2, py(s.Y[0]), c)
		}
		ly := plot.Min.Y + 8 + 16*i
		for d := -1; d <= 1; d++ {
			hline(img, plot.Max.X+10, plot.Max.X+30, ly+d, c)
		}
		drawText(img, plot.Max.X+36, ly+4, s.Name, color.Black)
	}
}

// niceCeil rounds v up to a round number (1, 1.2, 1.5, 2, ... 8 times a
// power of ten).
func niceCeil(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*e >= v*(1-1e-12) {
			return m * e
		}
	}
	return 10 * e
}

// niceTicks returns about five round tick values in [lo, hi].
func niceTicks(lo, hi float64) []float64 {
	step := niceStep((hi - lo) / 5)
	var out []float64
	for t := math.Ceil(lo/step) * step; t <= hi+step*1e-9; t += step {
		out = append(out, t)
	}
	return out
}

// niceStep rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v*(1-1e-12) {
			return m * e
		}
	}
	return 10 * e
}

func fmtTick(v float64) string {
	v = math.Round(v*1e6) / 1e6 // drop the float error of summed steps
	if v != 0 && (math.Abs(v) < 0.01 || math.Abs(v) >= 1e6) {
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

// line draws a 2-pixel-wide segment clipped to the plot rectangle.
func line(img *image.RGBA, clip image.Rectangle, x0, y0, x1, y1 float64, c color.Color) {
	n := int(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))*2) + 1
	for i := 0; i <= n; i++ {
		t := float64(i) / float64(n)
		x := int(math.Round(x0 + (x1-x0)*t))
		y := int(math.Round(y0 + (y1-y0)*t))
		for _, p := range [...]image.Point{{x, y}, {x + 1, y}, {x, y + 1}} {
			if p.In(clip.Inset(-1)) {
				img.Set(p.X, p.Y, c)
			}
		}
	}
}

func drawText(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
