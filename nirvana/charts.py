"""Plotly figure builders for the explorer: saliency heatmaps, allocation bars, sweeps, Pareto.

No streamlit here: the app, notebooks and tests build the same figures. Inputs are plain
tensors / arrays / dicts so a figure can be made from cached scores without a model.

Heatmaps use a log colour scale (z = log10 score, the colour bar labelled in powers of ten)
because saliency spans several orders of magnitude across layers; hover shows the raw score.
Neuron heatmaps are binned to at most `bins` columns per layer (`[L, I]` with I = 1536 would
be 46k cells, too heavy to resend on every slider move): "sorted" bins neurons by their rank
within the layer (best first), "index" bins them by position.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nirvana.methods import METHODS

KEPT = "#2a9d8f"
PRUNED = "#e76f51"
UNIFORM = "#264653"
COLORSCALE = "Viridis"
# Overlay for pruned units: transparent (kept) -> dark (pruned); z is the pruned fraction of a cell.
PRUNED_OVERLAY = [[0.0, "rgba(0,0,0,0)"], [1.0, "rgba(20,20,20,0.72)"]]
NEURON_MODES = ("sorted", "index")
# One colour per pruning criterion and per pruning method, shared by the app and the benchmark plots (a row added to
# CRITERIA or METHODS gets its line here: tests/test_criteria_table.py checks that every row has one, all different).
CRITERION_COLORS = {
    "nirvana": "#1f77b4",
    "taylor": "#2ca02c",
    "magnitude": "#d62728",
    "wanda": "#9467bd",
    "random": "#7f7f7f",
}
METHOD_COLORS = {
    "nirvana": "#1f77b4",  # NIRVANA's criterion's colour: the same model in both tables
    "llm-pruner": "#ff7f0e",
    "flap": "#8c564b",
    "slicegpt": "#17becf",
    "tyr": "#9467bd",
}
# Every legend: at the right of the plot, its top level with the plot's top. The title sits in the top
# margin and the axis titles below and left of the plot, so the legend meets neither (plotly widens the
# right margin to fit it). A horizontal legend above the plot sat on the title; below it, on the x title.
LEGEND = {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0, "yanchor": "top"}
# A family without a colour of its own (dense, an unknown name) takes the first of these not in use.
SPARE_COLORS = ("#333333", "#e377c2", "#bcbd22", "#ff9896", "#98df8a", "#c5b0d5", "#c49c94", "#9edae5")
# The second channel of `series_styles`: one per level (e.g. sparsity), in order of first appearance.
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "star", "triangle-down", "pentagon", "hexagon", "cross")
PATTERNS = ("", "/", "x", ".", "\\", "+", "-", "|")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def as_array(x) -> np.ndarray:
    """Tensor / list / array -> float64 numpy (CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def log10_scores(scores: np.ndarray) -> np.ndarray:
    """log10 of non-negative scores; zeros map to one decade below the smallest positive score."""
    positive = scores[scores > 0]
    floor = positive.min() / 10 if positive.size else 1e-12
    return np.log10(np.maximum(scores, floor))


def _log_colorbar(z: np.ndarray, title: str) -> dict:
    """Colour bar for z = log10(score), labelled in scores: ticks at 1, 2, 5 x 10^k inside the range."""
    finite = z[np.isfinite(z)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    mantissas = (1, 2, 5) if hi - lo < 3 else (1,)
    ticks = [
        (k + math.log10(m), m * 10.0**k)
        for k in range(math.floor(lo), math.ceil(hi) + 1)
        for m in mantissas
        if lo <= k + math.log10(m) <= hi
    ]
    step = max(1, math.ceil(len(ticks) / 7))
    ticks = ticks[::step] or [(lo, 10**lo)]
    return {
        "title": {"text": title},
        "tickvals": [t for t, _ in ticks],
        "ticktext": [f"{v:.3g}" for _, v in ticks],
    }


def shade(color: str, amount: float) -> str:
    """`color` (#rrggbb) mixed towards black (amount < 0) or white (amount > 0) by |amount| in [0, 1]."""
    rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    target = 255 if amount > 0 else 0
    return "#" + "".join(f"{round(c + (target - c) * abs(amount)):02x}" for c in rgb)


def series_styles(series: Sequence[tuple[str, object]], colors: dict[str, str] | None = None) -> list[dict]:
    """A distinct look for each series `(family, level)`, e.g. (criterion or method, sparsity).

    Colour says the family (`colors[family]`, else a spare colour), in a shade of its own per series,
    so no two series share a colour; the level (in order of first appearance) picks the marker
    `symbol`, bar `pattern` and line `dash`, a second channel for readers who do not tell shades apart.
    Returns one `{color, symbol, pattern, dash}` per series, in order.
    """
    colors = colors or {}
    families = list(dict.fromkeys(f for f, _ in series))
    levels = list(dict.fromkeys(level for _, level in series))
    spare = iter([c for c in SPARE_COLORS if c not in colors.values()] + list(SPARE_COLORS))
    base = {f: colors.get(f) or next(spare) for f in families}
    members = {f: [i for i, (g, _) in enumerate(series) if g == f] for f in families}
    used: set[str] = set()
    out = []
    for i, (family, level) in enumerate(series):
        n, k = len(members[family]), members[family].index(i)
        amount = 0.0 if n == 1 else -0.35 + 0.85 * k / (n - 1)  # darker ... lighter, the first one darkest
        color = shade(base[family], amount)
        for step in range(1, 60):  # two families whose shades meet: nudge along the shades until unique
            if color not in used:
                break
            color = shade(base[family], (amount + 1 + 0.033 * step) % 2 - 1)
        used.add(color)
        j = levels.index(level)
        out.append(
            {
                "color": color,
                "symbol": SYMBOLS[j % len(SYMBOLS)],
                "pattern": PATTERNS[j % len(PATTERNS)],
                "dash": DASHES[j % len(DASHES)],
            }
        )
    return out


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    """Every figure's title, size, margins and legend (`LEGEND`), set in one place so they agree."""
    fig.update_layout(
        title={"text": title, "x": 0.01}, height=height, margin={"l": 60, "r": 20, "t": 50, "b": 45}, legend=LEGEND
    )
    return fig


def kv_heatmap(attn, pruned=None, title: str = "KV-group scores", unit: str = "KV group") -> go.Figure:
    """Heatmap of KV-group scores `attn: [L, Hkv]`; `pruned: [L, Hkv]` bool marks units a plan removes.

    Rows are layers (layer 0 at the bottom), columns KV groups (`unit`: what a column is, e.g. "head"
    on a T5, where every head is its own KV group). Pruned cells are darkened and crossed, so the
    overlay reads even on a 30 x 3 grid.
    """
    s = as_array(attn)  # (L, Hkv)
    z = log10_scores(s)
    num_layers, hkv = s.shape
    fig = go.Figure(
        go.Heatmap(
            z=z.astype(np.float32),
            x=list(range(hkv)),
            y=list(range(num_layers)),
            customdata=s.astype(np.float32),
            colorscale=COLORSCALE,
            colorbar=_log_colorbar(z, "score"),
            hovertemplate=f"layer %{{y}}<br>{unit} %{{x}}<br>score %{{customdata:.3e}}<extra></extra>",
            name="score",
        )
    )
    if pruned is not None:
        p = as_array(pruned).astype(bool)
        fig.add_trace(_overlay(p.astype(np.float32), list(range(hkv)), list(range(num_layers))))
        layers, groups = np.nonzero(p)
        fig.add_trace(
            go.Scatter(
                x=groups.tolist(),
                y=layers.tolist(),
                mode="markers",
                marker={"symbol": "x-thin", "size": 9, "line": {"width": 2, "color": PRUNED}},
                name="pruned",
                hoverinfo="skip",
            )
        )
    fig.update_xaxes(title_text=unit, dtick=1)
    fig.update_yaxes(title_text="layer", dtick=_layer_tick(num_layers))
    return _layout(fig, title, 420)


def _layer_tick(num_layers: int) -> int:
    """A whole-layer tick step, about a dozen labels at most (plotly would label 0.5 steps on 2 layers)."""
    return max(1, math.ceil(num_layers / 12))


def _bins(n: int, bins: int) -> list[np.ndarray]:
    return np.array_split(np.arange(n), min(n, bins))


def bin_neurons(mlp, pruned=None, mode: str = "sorted", bins: int = 128):
    """Bin `mlp: [L, I]` to `[L, B]`: (mean score, pruned fraction or None, first/last unit of each bin).

    `sorted`: neurons are ordered by score within each layer (best first), so column b holds
    ranks of the layer; `index`: column b holds neurons by position. B = min(I, bins).
    """
    if mode not in NEURON_MODES:
        raise ValueError(f"mode must be one of {NEURON_MODES}, got {mode!r}")
    s = as_array(mlp)  # (L, I)
    p = as_array(pruned).astype(bool) if pruned is not None else None
    if mode == "sorted":
        order = np.argsort(-s, axis=1, kind="stable")  # (L, I) best first
        s = np.take_along_axis(s, order, axis=1)
        p = np.take_along_axis(p, order, axis=1) if p is not None else None
    groups = _bins(s.shape[1], bins)
    mean = np.stack([s[:, g].mean(axis=1) for g in groups], axis=1)  # (L, B)
    frac = np.stack([p[:, g].mean(axis=1) for g in groups], axis=1) if p is not None else None
    edges = np.array([[g[0], g[-1]] for g in groups])  # (B, 2)
    return mean, frac, edges


def neuron_heatmap(mlp, pruned=None, mode: str = "sorted", bins: int = 128, title: str = "MLP neuron scores"):
    """Heatmap of neuron scores `mlp: [L, I]`, binned (see `bin_neurons`); pruned fraction overlaid."""
    mean, frac, edges = bin_neurons(mlp, pruned, mode, bins)
    num_layers, num_bins = mean.shape
    z = log10_scores(mean)
    unit = "rank" if mode == "sorted" else "neuron"
    x = list(range(num_bins))
    first = np.broadcast_to(edges[:, 0], mean.shape)
    last = np.broadcast_to(edges[:, 1], mean.shape)
    custom = np.stack([first, last, mean, frac if frac is not None else np.zeros_like(mean)], axis=-1)
    hover = f"layer %{{y}}<br>{unit}s %{{customdata[0]:d}}-%{{customdata[1]:d}}<br>mean score %{{customdata[2]:.3e}}"
    if frac is not None:
        hover += "<br>pruned %{customdata[3]:.0%}"
    fig = go.Figure(
        go.Heatmap(
            z=z.astype(np.float32),
            x=x,
            y=list(range(num_layers)),
            customdata=custom.astype(np.float32),
            colorscale=COLORSCALE,
            colorbar=_log_colorbar(z, "score"),
            hovertemplate=hover + "<extra></extra>",
            name="score",
        )
    )
    if frac is not None:
        fig.add_trace(_overlay(frac.astype(np.float32), x, list(range(num_layers))))
    width = edges[0, 1] - edges[0, 0] + 1
    label = f"{unit} bin ({width} per column{', best first' if mode == 'sorted' else ''})"
    fig.update_xaxes(title_text=label)
    fig.update_yaxes(title_text="layer", dtick=_layer_tick(num_layers))
    return _layout(fig, title, 420)


def _overlay(fraction: np.ndarray, x, y) -> go.Heatmap:
    return go.Heatmap(
        z=fraction,
        x=x,
        y=y,
        zmin=0,
        zmax=1,
        colorscale=PRUNED_OVERLAY,
        showscale=False,
        hoverinfo="skip",
        name="pruned",
    )


def layer_totals(attn, mlp, title: str = "Per-layer totals") -> go.Figure:
    """The summed KV-group scores and summed neuron scores of each layer, dots on a log y axis.

    Dots, not bars: a bar on a log axis starts at an arbitrary baseline (the axis' lower end), so its
    length says nothing; a dot's height is the value. Totals span decades, hence the log axis.
    """
    a, m = as_array(attn).sum(axis=1), as_array(mlp).sum(axis=1)  # (L,), (L,)
    layers = list(range(len(a)))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("attention: sum over KV groups", "MLP: sum over neurons"))
    hover = "layer %{x}<br>total %{y:.3e}<extra></extra>"
    for col, values, color, name in ((1, a, UNIFORM, "attention"), (2, m, KEPT, "MLP")):
        dots = go.Scatter(
            x=layers, y=values, mode="lines+markers", marker={"color": color, "size": 8},
            line={"color": color, "width": 1}, name=name, hovertemplate=hover,
        )  # fmt: skip
        fig.add_trace(dots, 1, col)
    fig.update_yaxes(type="log")
    fig.update_xaxes(title_text="layer")
    fig.update_layout(showlegend=False)
    return _layout(fig, title, 320)


def kept_units_bars(
    kept_kv: Sequence[int],
    kept_neurons: Sequence[int],
    kv_total: int,
    neuron_total: int,
    uniform_kv: Sequence[int] | None = None,
    uniform_neurons: Sequence[int] | None = None,
    title: str = "Kept units per layer",
    compare: tuple[str, Sequence[int], Sequence[int]] | None = None,
    methods: Sequence[tuple[str, Sequence[int], Sequence[int]]] = (),
) -> go.Figure:
    """Kept KV groups and kept neurons per layer (bars: global ranking; markers: uniform allocation).

    `compare = (criterion, kept_kv, kept_neurons)` adds a second criterion's global allocation as
    diamonds, so two criteria's per-layer cuts can be read against each other. `methods`, rows of
    `(method name, kept_kv, kept_neurons)`, add other pruning methods' plans at the same target as
    lines in their colours (LLM-Pruner's flat band, FLAP's adaptive layers).
    """
    layers = list(range(len(kept_kv)))
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=(f"kept KV groups (of {kv_total})", f"kept MLP neurons (of {neuron_total})"),
    )
    for row, values, unit in ((1, kept_kv, "KV groups"), (2, kept_neurons, "neurons")):
        bar = go.Bar(
            x=layers,
            y=list(values),
            name="global ranking",
            marker_color=KEPT,
            hovertemplate=f"layer %{{x}}<br>kept %{{y}} {unit}<extra>global</extra>",
            legendgroup="global",
            showlegend=row == 1,
        )
        fig.add_trace(bar, row, 1)
    overlays = []  # (kv, neurons, name, group, style): one marker trace per subplot row each
    if uniform_kv is not None and uniform_neurons is not None:
        style = {"mode": "lines+markers", "line": {"color": UNIFORM, "dash": "dot"}, "marker": {"size": 5}}
        overlays.append((uniform_kv, uniform_neurons, "uniform allocation", "uniform", style))
    if compare is not None:
        name, kv, neurons = compare
        marker = {"symbol": "diamond", "size": 7, "color": CRITERION_COLORS.get(name, PRUNED)}
        overlays.append((kv, neurons, f"{name} (global)", name, {"mode": "markers", "marker": marker}))
    for name, kv, neurons in methods:
        color = METHOD_COLORS.get(name, PRUNED)
        style = {"mode": "lines+markers", "line": {"color": color}, "marker": {"symbol": "square", "size": 6}}
        overlays.append((kv, neurons, METHODS[name].label if name in METHODS else name, name, style))
    for kv, neurons, name, group, style in overlays:
        for row, values in ((1, kv), (2, neurons)):
            trace = go.Scatter(
                x=layers,
                y=list(values),
                name=name,
                hovertemplate=f"layer %{{x}}<br>kept %{{y}}<extra>{group}</extra>",
                legendgroup=group,
                showlegend=row == 1,
                **style,
            )
            fig.add_trace(trace, row, 1)
    fig.update_yaxes(range=[0, kv_total * 1.05], row=1, col=1)
    fig.update_yaxes(range=[0, neuron_total * 1.05], row=2, col=1)
    fig.update_xaxes(title_text="layer", row=2, col=1)
    return _layout(fig, title, 460)


def kind_kept_bars(
    kept: dict[str, Sequence[int]], totals: dict[str, int], labels: dict[str, str], title: str = "Kept units per layer"
) -> go.Figure:
    """Kept units per layer of several unit kinds (a T5's five), one subplot each: `kept[kind][layer]`
    of `totals[kind]` (the dense width), titled by `labels[kind]`."""
    kinds = list(kept)
    fig = make_subplots(
        rows=len(kinds), cols=1, vertical_spacing=0.35 / max(1, len(kinds)),
        subplot_titles=[f"{labels.get(k, k)}: kept (of {totals[k]})" for k in kinds],
    )  # fmt: skip
    for row, kind in enumerate(kinds, start=1):
        values = list(kept[kind])
        fig.add_trace(
            go.Bar(
                x=list(range(len(values))),
                y=values,
                marker_color=KEPT,
                name=labels.get(kind, kind),
                hovertemplate=f"layer %{{x}}<br>kept %{{y}} of {totals[kind]}<extra></extra>",
            ),
            row,
            1,
        )
        fig.update_yaxes(range=[0, totals[kind] * 1.05], row=row, col=1)
        fig.update_xaxes(dtick=1, row=row, col=1)
    fig.update_xaxes(title_text="layer", row=len(kinds), col=1)
    fig.update_layout(showlegend=False)
    return _layout(fig, title, 150 + 140 * len(kinds))


def bar_chart(
    labels: Sequence[str], values: Sequence[float], highlight: int | None = None, *, title: str, y_title: str
):
    """Plain bars, one of them highlighted (e.g. KL per calibration candidate, the chosen one)."""
    colours = [PRUNED if i == highlight else UNIFORM for i in range(len(labels))]
    fig = go.Figure(
        go.Bar(x=list(labels), y=list(values), marker_color=colours, hovertemplate="%{x}<br>%{y:.4g}<extra></extra>")
    )
    fig.update_yaxes(title_text=y_title)
    return _layout(fig, title, 340)


def sweep_chart(
    xs: Sequence[float],
    series: dict[str, Sequence[float | None]],
    *,
    x_title: str,
    title: str,
    marker_x: float | None = None,
    marker_label: str = "",
    log_y: Sequence[str] = (),
) -> go.Figure:
    """One subplot per series against a swept setting (sparsity or gamma); optional vertical marker."""
    names = list(series)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, horizontal_spacing=0.1)
    for col, name in enumerate(names, start=1):
        fig.add_trace(
            go.Scatter(
                x=list(xs),
                y=list(series[name]),
                mode="lines+markers",
                name=name,
                marker_color=KEPT if col == 1 else UNIFORM,
                hovertemplate=f"{x_title} %{{x:.3g}}<br>{name} %{{y:.4g}}<extra></extra>",
            ),
            1,
            col,
        )
        fig.update_xaxes(title_text=x_title, row=1, col=col)
        if name in log_y:
            fig.update_yaxes(type="log", row=1, col=col)
        if marker_x is not None:
            fig.add_vline(x=marker_x, line_dash="dash", line_color=PRUNED, row=1, col=col)
    if marker_x is not None and marker_label:  # inside the plot's top: above it is the subplot title's place
        fig.add_annotation(
            x=marker_x, y=1.0, yref="paper", yanchor="top", xref="x", text=marker_label, showarrow=False,
            font={"color": PRUNED},
        )  # fmt: skip
    fig.update_layout(showlegend=False)
    return _layout(fig, title, 340)


def methods_sweep_chart(
    lines: dict[str, tuple[Sequence[float], dict[str, Sequence[float | None]]]],
    *,
    x_title: str,
    title: str,
    log_y: Sequence[str] = (),
) -> go.Figure:
    """One subplot per measure, one line per method: `lines = {method name: (xs, {measure: ys})}`.

    The sweep with methods as series: each method's points share the x axis (target sparsity), in
    the method's colour, so LLM-Pruner, FLAP and NIRVANA read against each other on every measure.
    """
    names = list(dict.fromkeys(m for _, series in lines.values() for m in series))
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, horizontal_spacing=0.1)
    for method, (xs, series) in lines.items():
        label = METHODS[method].label if method in METHODS else method
        for col, name in enumerate(names, start=1):
            if name not in series:
                continue
            fig.add_trace(
                go.Scatter(
                    x=list(xs),
                    y=list(series[name]),
                    mode="lines+markers",
                    name=label,
                    legendgroup=method,
                    showlegend=col == 1,
                    marker_color=METHOD_COLORS.get(method, UNIFORM),
                    hovertemplate=f"{label}<br>{x_title} %{{x:.3g}}<br>{name} %{{y:.4g}}<extra></extra>",
                ),
                1,
                col,
            )
    for col, name in enumerate(names, start=1):
        fig.update_xaxes(title_text=x_title, row=1, col=col)
        if name in log_y:
            fig.update_yaxes(type="log", row=1, col=col)
    return _layout(fig, title, 380)


def criteria_chart(
    rows: Sequence[dict],
    *,
    y_title: str,
    log_y: bool = True,
    reference: float | None = None,
    reference_label: str = "dense",
    title: str = "Quality against sparsity",
) -> go.Figure:
    """One line per (criterion, allocation) from rows `{criterion, allocation, sparsity, value}`.

    Global allocation is drawn solid, uniform dashed, one colour per criterion; `reference` (the
    dense model's value) is a dotted horizontal line.
    """
    fig = go.Figure()
    lines: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in rows:
        lines.setdefault((r["criterion"], r["allocation"]), []).append((float(r["sparsity"]), float(r["value"])))
    for (criterion, allocation), pts in lines.items():
        pts.sort()
        hover = f"{criterion}, {allocation}<br>sparsity %{{x:.2f}}<br>{y_title} %{{y:.4g}}<extra></extra>"
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                mode="lines+markers",
                name=f"{criterion} ({allocation})",
                line={"color": CRITERION_COLORS.get(criterion), "dash": "solid" if allocation == "global" else "dash"},
                marker={"symbol": "circle" if allocation == "global" else "x"},
                hovertemplate=hover,
            )
        )
    if reference is not None and lines:
        # a trace, not add_hline + annotation: plotly places annotations on log axes by exponent
        xs = [p[0] for pts in lines.values() for p in pts]
        fig.add_trace(
            go.Scatter(
                x=[min(xs), max(xs)],
                y=[reference, reference],
                mode="lines",
                name=reference_label,
                line={"color": "black", "dash": "dot"},
                hovertemplate=f"{reference_label}: %{{y:.4g}}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="target block sparsity")
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
    return _layout(fig, title, 420)


def variance_kept_chart(
    kept: dict, width: int, hidden: int, measured: dict | None = None, title: str | None = None
) -> go.Figure:
    """SliceGPT's PCA spectrum: per layer, the fraction of each sliced stream's variance that `width` of
    `hidden` dimensions keep. `kept`: `Spectra.kept(width)` of the dense model (lines); `measured`: a
    pruned model's own `variance_kept` (markers), the PCA of signals already sliced upstream."""
    layers = list(range(len(kept["attention"])))
    fig = go.Figure()
    streams = (("attention", "after attention (MLP input)", KEPT), ("mlp", "after the MLP (layer output)", UNIFORM))
    for key, name, color in streams:
        series = [(kept[key], "dense spectrum", "dense", {"mode": "lines+markers", "line": {"color": color}})]
        if measured is not None:
            marker = {"color": color, "symbol": "x", "size": 8}
            series.append((measured[key], "this prune", "pruned", {"mode": "markers", "marker": marker}))
        for values, what, tag, style in series:
            hover = f"layer %{{x}}<br>{name}<br>variance kept %{{y:.2%}}<extra>{tag}</extra>"
            fig.add_trace(go.Scatter(x=layers, y=values, name=f"{name}, {what}", hovertemplate=hover, **style))
    fig.add_hline(
        y=kept["embedding"],
        line_dash="dot",
        line_color=PRUNED,
        annotation_text=f"embedding output {kept['embedding']:.1%}",
        annotation_position="bottom right",
    )
    fig.update_xaxes(title_text="layer")
    fig.update_yaxes(title_text="fraction of variance kept", tickformat=".0%", rangemode="tozero")
    return _layout(fig, title or f"Variance kept by {width} of {hidden} hidden dimensions, per layer", 380)


def gamma_chart(points: Sequence[dict], gamma_star: float, title: str = "KL to dense against γ") -> go.Figure:
    """KL against gamma, one line per sparsity, from `{sparsity, gamma, kl}` points; γ* dashed."""
    fig = go.Figure()
    for sparsity in sorted({float(p["sparsity"]) for p in points}):
        pts = sorted((float(p["gamma"]), float(p["kl"])) for p in points if float(p["sparsity"]) == sparsity)
        best = min(pts, key=lambda p: p[1])
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                mode="lines+markers",
                name=f"sparsity {sparsity:g} (best γ {best[0]:g})",
                hovertemplate=f"sparsity {sparsity:g}<br>γ %{{x:.3g}}<br>KL %{{y:.4f}}<extra></extra>",
            )
        )
    fig.add_vline(x=gamma_star, line_dash="dash", line_color=PRUNED)
    fig.update_xaxes(title_text="γ (share of neurons pruned / share of KV groups pruned)", type="log")
    fig.update_yaxes(title_text="KL to dense (nats/token)", type="log")
    return _layout(fig, title, 400)


def pareto_front(xs: Sequence[float], ys: Sequence[float]) -> list[int]:
    """Indices of points not dominated when x is maximised (speed) and y minimised (perplexity/KL)."""
    front = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        dominated = any(
            (xo >= x and yo <= y) and (xo > x or yo < y) for j, (xo, yo) in enumerate(zip(xs, ys)) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: xs[i])


def pareto_chart(
    xs: Sequence[float],
    ys: Sequence[float],
    labels: Sequence[str],
    *,
    x_title: str,
    y_title: str,
    title: str = "Pareto: quality vs speed",
    selected: int | None = None,
    methods: Sequence[str] | None = None,
    sparsities: Sequence[float | None] | None = None,
    gammas: Sequence[float | None] | None = None,
    log_y: bool = False,
    highlight: tuple[float, float, str] | None = None,
) -> go.Figure:
    """Scatter of every swept plan with the Pareto front joined; `customdata` holds the point index.

    `methods[i]` names point i's method: one trace per method, in its colour (`METHOD_COLORS`; "dense"
    dark grey) and marker (`PARETO_SYMBOLS`), so the legend says which is which. The hover label gives the
    point's sparsity and γ (`sparsities`, `gammas`; a None γ, a method without one, is left out). `log_y`:
    a log quality axis (perplexity spans decades). `highlight = (x, y, label)` marks one point, e.g. a
    recommendation, with a large star and its label.
    """
    n = len(xs)
    methods = list(methods) if methods is not None else ["plans"] * n
    front = pareto_front(xs, ys)
    fig = go.Figure()
    for method in dict.fromkeys(methods):  # one trace per method, in order of first appearance
        idx = [i for i in range(n) if methods[i] == method]
        fig.add_trace(
            go.Scatter(
                x=[xs[i] for i in idx],
                y=[ys[i] for i in idx],
                mode="markers",
                name=METHODS[method].label if method in METHODS else method,
                text=[_pareto_hover(labels[i], i, sparsities, gammas) for i in idx],
                customdata=idx,
                marker={"size": 11, **_pareto_marker(method)},
                hovertemplate=f"%{{text}}<br>{x_title} %{{x:.4g}}<br>{y_title} %{{y:.4g}}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[xs[i] for i in front],
            y=[ys[i] for i in front],
            mode="lines",
            name="Pareto front",
            line={"color": KEPT, "width": 2},
            hoverinfo="skip",
        )
    )
    if selected is not None:
        fig.add_trace(
            go.Scatter(
                x=[xs[selected]],
                y=[ys[selected]],
                mode="markers",
                name="selected",
                marker={"size": 18, "color": "rgba(0,0,0,0)", "line": {"width": 3, "color": PRUNED}},
                hoverinfo="skip",
            )
        )
    if highlight is not None:
        x, y, label = highlight
        fig.add_trace(  # a trace with text, not an annotation: plotly places annotations on log axes by exponent
            go.Scatter(
                x=[x],
                y=[y],
                mode="markers+text",
                name=label,
                text=[label],
                textposition="top center",
                marker={"symbol": "star", "size": 20, "color": PRUNED, "line": {"width": 1, "color": "black"}},
                hovertemplate=f"{label}<br>{x_title} %{{x:.4g}}<br>{y_title} %{{y:.4g}}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
    fig.update_layout(clickmode="event+select")
    return _layout(fig, title, 420)


# The Pareto chart's marker per method (colour is `METHOD_COLORS`'): a second channel besides colour.
PARETO_SYMBOLS = {"dense": "star", "nirvana": "circle", "llm-pruner": "square", "flap": "diamond"}


def _pareto_marker(method: str) -> dict:
    """{color, symbol} of a method's points: its own colour and marker; "dense" dark grey; others from the tables."""
    others = [name for name in METHODS if name not in PARETO_SYMBOLS]
    symbol = PARETO_SYMBOLS.get(method) or SYMBOLS[(others.index(method) if method in others else 0) + 3]
    color = "#333333" if method == "dense" else METHOD_COLORS.get(method, UNIFORM)
    return {"color": color, "symbol": symbol}


def _pareto_hover(label: str, i: int, sparsities, gammas) -> str:
    """A point's hover text: its label, then sparsity and γ (when given and not None)."""
    parts = [label]
    if sparsities is not None and sparsities[i] is not None:
        parts.append(f"sparsity {sparsities[i]:.2f}")
    if gammas is not None and gammas[i] is not None and gammas[i] == gammas[i]:  # None or NaN: no γ
        parts.append(f"γ {gammas[i]:.2f}")
    return "<br>".join(parts)


def pruned_masks(plan) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks of the units a `PruningPlan` removes: (attn `[L, Hkv]`, mlp `[L, I]`), dense widths."""
    kv, inter = plan.model["num_kv_heads"], plan.model["intermediate"]
    attn = np.ones((len(plan.layers), max(kv)), dtype=bool)
    mlp = np.ones((len(plan.layers), max(inter)), dtype=bool)
    for layer in plan.layers:
        attn[layer.layer_idx, layer.kept_kv_groups] = False
        mlp[layer.layer_idx, layer.kept_neurons] = False
    return attn, mlp


def kind_masks(kept: dict[str, Sequence[Sequence[int]]], widths: dict[str, int]) -> dict[str, np.ndarray]:
    """Boolean masks of the units a plan of unit kinds removes (a T5 plan's `kept`): `{kind: [L, width]}`."""
    out = {}
    for kind, rows in kept.items():
        mask = np.ones((len(rows), widths[kind]), dtype=bool)
        for layer, units in enumerate(rows):
            mask[layer, list(units)] = False
        out[kind] = mask
    return out
