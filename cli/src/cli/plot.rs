//! The SVG of `tessel bench --plot`: median time and temp memory against
//! the swept size, one line per kernel, with round axis ticks (1-2-5
//! steps), axis titles and a legend.

use std::fmt::Write;

use super::bench::Row;

/// Width and height of one panel.
const PANEL: (f64, f64) = (420.0, 300.0);
/// Margins of a panel's plot area: left, right, top, bottom.
const MARGIN: (f64, f64, f64, f64) = (64.0, 16.0, 34.0, 48.0);
/// Line colors, one per kernel (cycled).
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
/// Legend items per row and the height of a row.
const LEGEND: (usize, f64) = (3, 18.0);

/// Round tick values from 0 up to at least `max`: a step of 1, 2 or 5
/// times a power of ten, at most 6 intervals (0 to 1 in steps of 0.2 when
/// `max` is not positive).
/// For example 2048 gets ticks 0, 500, …, 2500 and 0.37 gets 0, 0.1, …, 0.4.
pub fn nice_ticks(max: f64) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let mut e = raw.log10().floor() as i32;
    let frac = raw / 10f64.powi(e);
    let k = match frac {
        f if f <= 1.0 + 1e-9 => 1,
        f if f <= 2.0 + 1e-9 => 2,
        f if f <= 5.0 + 1e-9 => 5,
        _ => {
            e += 1;
            1
        }
    };
    // i·k·10^e, dividing for negative powers so 3 · 0.1 prints as 0.3.
    let at = |i: usize| {
        let m = (i * k) as f64;
        if e >= 0 {
            m * 10f64.powi(e)
        } else {
            m / 10f64.powi(-e)
        }
    };
    let mut ticks = vec![0.0];
    while *ticks.last().unwrap_or(&0.0) < max * (1.0 - 1e-9) {
        ticks.push(at(ticks.len()));
    }
    ticks
}

/// `v` with as many decimals as the tick step `step` needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10() - 1e-9).ceil().max(0.0) as usize
    };
    format!("{v:.decimals$}")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// What the `size` of a workload's rows is.
fn size_title(workload: &str) -> &'static str {
    match workload {
        "attention" => "sequence length",
        "sparse" => "density (%)",
        "gemm" => "matrix size N (N × N × N)",
        "norm" | "moe" => "tokens",
        _ => "size",
    }
}

/// One panel: its left edge, title, y-axis title and the plotted value.
struct Panel {
    x0: f64,
    title: &'static str,
    y_title: &'static str,
    value: fn(&Row) -> f64,
}

/// The plot area of a panel at `x0`: left, right, top, bottom.
fn area(x0: f64) -> (f64, f64, f64, f64) {
    let (w, h) = PANEL;
    let (l, r, t, b) = MARGIN;
    (x0 + l, x0 + w - r, t, h - b)
}

/// The axes: light grid lines, ticks with labels, the frame and the titles.
fn axes(s: &mut String, p: &Panel, workload: &str, xt: &[f64], yt: &[f64]) {
    let (left, right, top, bottom) = area(p.x0);
    let (xmax, ymax) = (xt[xt.len() - 1], yt[yt.len() - 1]);
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"{}\" font-size=\"13\">{}: {}</text>",
        top - 12.0,
        esc(workload),
        p.title
    );
    let xstep = xt.get(1).copied().unwrap_or(1.0);
    for &v in xt {
        let x = left + v / xmax * (right - left);
        let _ = writeln!(
            s,
            "<g class=\"xtick\"><line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{bottom}\" stroke=\"#eee\"/><line x1=\"{x:.1}\" y1=\"{bottom}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#444\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text></g>",
            bottom + 5.0,
            bottom + 17.0,
            tick_label(v, xstep)
        );
    }
    let ystep = yt.get(1).copied().unwrap_or(1.0);
    for &v in yt {
        let y = bottom - v / ymax * (bottom - top);
        let _ = writeln!(
            s,
            "<g class=\"ytick\"><line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{right}\" y2=\"{y:.1}\" stroke=\"#eee\"/><line x1=\"{}\" y1=\"{y:.1}\" x2=\"{left}\" y2=\"{y:.1}\" stroke=\"#444\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text></g>",
            left - 5.0,
            left - 8.0,
            y + 4.0,
            tick_label(v, ystep)
        );
    }
    let _ = writeln!(
        s,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>",
        right - left,
        bottom - top
    );
    let _ = writeln!(
        s,
        "<text class=\"axis-title\" x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
        (left + right) / 2.0,
        bottom + 36.0,
        esc(size_title(workload))
    );
    let (yx, yy) = (p.x0 + 16.0, (top + bottom) / 2.0);
    let _ = writeln!(
        s,
        "<text class=\"axis-title\" x=\"{yx}\" y=\"{yy:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {yx} {yy:.1})\">{}</text>",
        p.y_title
    );
}

/// An SVG with two panels (median time in ms and temp memory in MiB against
/// size), one line per kernel of `workload`, and a legend of the kernels
/// below them.
pub fn svg(rows: &[Row], workload: &str) -> String {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.workload == workload).collect();
    let mut variants: Vec<&str> = Vec::new();
    for r in &rows {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    let (w, h) = PANEL;
    let legend_rows = variants.len().div_ceil(LEGEND.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        2.0 * w,
        h + 12.0 + LEGEND.1 * legend_rows as f64
    );
    let xt = nice_ticks(rows.iter().map(|r| r.size).fold(0.0, f64::max));
    let panels = [
        Panel {
            x0: 0.0,
            title: "median time",
            y_title: "time (ms)",
            value: |r| r.median_ms,
        },
        Panel {
            x0: w,
            title: "temp memory",
            y_title: "memory (MiB)",
            value: |r| r.temp_mib,
        },
    ];
    for p in &panels {
        let yt = nice_ticks(rows.iter().map(|r| (p.value)(r)).fold(0.0, f64::max));
        axes(&mut s, p, workload, &xt, &yt);
        let (left, right, top, bottom) = area(p.x0);
        let (xmax, ymax) = (xt[xt.len() - 1], yt[yt.len() - 1]);
        for (vi, v) in variants.iter().enumerate() {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.variant == *v)
                .map(|r| {
                    let x = left + r.size / xmax * (right - left);
                    let y = bottom - (p.value)(r) / ymax * (bottom - top);
                    (x, y)
                })
                .collect();
            let c = COLORS[vi % COLORS.len()];
            let line: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>",
                line.join(" ")
            );
            for (x, y) in &pts {
                let _ = writeln!(
                    s,
                    "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{c}\"/>"
                );
            }
        }
    }
    s.push_str("<g class=\"legend\">\n");
    let item_w = 2.0 * w / LEGEND.0 as f64;
    for (vi, v) in variants.iter().enumerate() {
        let c = COLORS[vi % COLORS.len()];
        let x = MARGIN.0 / 2.0 + (vi % LEGEND.0) as f64 * item_w;
        let y = h + LEGEND.1 * (vi / LEGEND.0) as f64;
        let _ = writeln!(
            s,
            "<line x1=\"{x}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{c}\" stroke-width=\"2\"/><circle cx=\"{}\" cy=\"{y}\" r=\"3\" fill=\"{c}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            x + 24.0,
            x + 12.0,
            x + 30.0,
            y + 4.0,
            esc(v)
        );
    }
    s.push_str("</g>\n</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::nice_ticks;

    #[test]
    fn plot_ticks_are_round() {
        assert_eq!(
            nice_ticks(2048.0),
            [0.0, 500.0, 1000.0, 1500.0, 2000.0, 2500.0]
        );
        assert_eq!(nice_ticks(100.0), [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(nice_ticks(0.37), [0.0, 0.1, 0.2, 0.3, 0.4]);
        assert_eq!(nice_ticks(7.0), [0.0, 2.0, 4.0, 6.0, 8.0]);
        assert_eq!(nice_ticks(0.0), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
    }
}
