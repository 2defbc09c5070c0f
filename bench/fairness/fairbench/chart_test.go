package fairbench

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestFmtTick(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0"}, {0.6000000000000001, "0.6"}, {2500, "2500"}, {0.001, "0.001"}, {2e6, "2e+06"},
	}
	for _, tt := range tests {
		if got := fmtTick(tt.v); got != tt.want {
			t.Errorf("fmtTick(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestWriteChartIsDeterministicPNG(t *testing.T) {
	dir := t.TempDir()
	panels := []Panel{
		{Title: "lines", XLabel: "x", YLabel: "y", Series: []Series{{Name: "a", X: []float64{0, 1, 2}, Y: []float64{1, 3, 2}}}},
		{Title: "cdf", LogX: true, YMax: 1, Series: []Series{{Name: "b", X: []float64{0.01, 0.1, 1}, Y: []float64{0.3, 0.6, 1}, Step: true}, {Name: "empty"}}},
	}
	var files [2][]byte
	for i := range files {
		p := filepath.Join(dir, "c.png")
		if err := WriteChart(p, "title", panels); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("WriteChart wrote an invalid PNG: %v", err)
		}
		if b := img.Bounds(); b.Dx() != chartWidth || b.Dy() != 20+2*panelHeight {
			t.Errorf("chart is %v, want %dx%d", b, chartWidth, 20+2*panelHeight)
		}
		files[i], _ = os.ReadFile(p)
	}
	if string(files[0]) != string(files[1]) {
		t.Error("two charts of the same data differ")
	}
}
