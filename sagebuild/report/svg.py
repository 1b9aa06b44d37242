"""The report's inline SVG charts, drawn here with no plotting library so the report stays one
self-contained file: speed-up over SDPA against log2(sequence length), and time per call per
provider per shape."""

from __future__ import annotations

import math
from html import escape

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
W, H = 760, 320
_L, _R, _T, _B = 60, 290, 30, 45  # margins: left, right (legend: the longest label fits), top, bottom


def speedup_chart(series: dict[str, list[tuple[int, float]]], title: str, gate: float | None = None) -> str:
    """``series`` maps a provider name to (seq, speed-up) points; returns an ``<svg>`` element."""
    pts = [p for s in series.values() for p in s]
    seqs = sorted({p[0] for p in pts}) or [1024]
    ys = [p[1] for p in pts] + [1.0] + ([gate] if gate else [])
    y_max = max(ys) * 1.15
    x_lo, x_hi = math.log2(seqs[0]), math.log2(seqs[-1])
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    pw, ph = W - _L - _R, H - _T - _B

    def x(seq: float) -> float:
        return _L + (math.log2(seq) - x_lo) / (x_hi - x_lo) * pw

    def y(v: float) -> float:
        return _T + ph - v / y_max * ph

    def hline(v: float, style: str, cls: str = "") -> str:
        return f'<line{cls} x1="{_L}" y1="{y(v):.1f}" x2="{_L + pw}" y2="{y(v):.1f}" {style}/>'

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="speedup-chart" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2:.0f}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<line x1="{_L}" y1="{_T + ph}" x2="{_L + pw}" y2="{_T + ph}" stroke="black"/>',
        f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_T + ph}" stroke="black"/>',
    ]

    for s in seqs:
        out += [
            f'<line x1="{x(s):.1f}" y1="{_T + ph}" x2="{x(s):.1f}" y2="{_T + ph + 5}" stroke="black"/>',
            f'<text x="{x(s):.1f}" y="{_T + ph + 18}" text-anchor="middle" font-size="11">{s}</text>',
        ]
    out.append(
        f'<text x="{_L + pw / 2:.0f}" y="{H - 6}" text-anchor="middle" font-size="12">'
        "sequence length (log scale)</text>"
    )
    for i in range(5):
        v = y_max * i / 4
        out.append(f'<text x="{_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">{v:.2f}</text>')
        out.append(hline(v, 'stroke="#eee"'))
    out.append(
        f'<text x="14" y="{_T + ph / 2:.0f}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {_T + ph / 2:.0f})">speed-up vs SDPA (×)</text>'
    )
    out.append(hline(1.0, 'stroke="#888" stroke-dasharray="4 3"'))
    if gate:
        out.append(hline(gate, 'stroke="#d62728" stroke-dasharray="8 4"', ' class="gate"'))
        out.append(
            f'<text x="{_L + pw - 4}" y="{y(gate) - 4:.1f}" text-anchor="end" font-size="10" '
            f'fill="#d62728">gate {gate:g}×</text>'
        )
    for i, (name, points) in enumerate(series.items()):
        color = _COLORS[i % len(_COLORS)]
        pts_s = sorted(points)
        if len(pts_s) > 1:
            coords = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in pts_s)
            out.append(
                f'<polyline class="series" points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>'
            )
        for s, v in pts_s:
            out.append(
                f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="3.5" fill="{color}">'
                f"<title>{escape(name)} @ {s}: {v:.3f}×</title></circle>"
            )
        ly = _T + 14 + i * 18
        out.append(f'<rect x="{W - _R + 12}" y="{ly - 9}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{W - _R + 30}" y="{ly + 1}" font-size="11">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


_BAR_W, _BAR_LABEL, _BAR_H, _PANEL_HEAD = 440, 170, 16, 24  # width, label column, bar row, panel title


def time_chart(groups: dict[str, list[tuple[str, float]]], title: str) -> str:
    """``groups`` maps a shape (``seq=4096``) to (provider, median ms) pairs: one panel of horizontal
    bars per shape, each on its own linear axis from 0 (shapes differ by orders of magnitude)."""
    height = 30 + sum(_PANEL_HEAD + _BAR_H * max(len(bars), 1) + 8 for bars in groups.values())
    span = _BAR_W - _BAR_LABEL - 70  # the longest bar; its value's text to the right
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="time-chart" width="{_BAR_W}" height="{height}" '
        f'viewBox="0 0 {_BAR_W} {height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{_BAR_W}" height="{height}" fill="white"/>',
        f'<text x="{_BAR_W / 2:.0f}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>',
    ]
    y = 30
    colors: dict[str, str] = {}
    for shape, bars in groups.items():
        out.append(f'<text x="4" y="{y + 15}" font-size="12" font-weight="bold">{escape(shape)}</text>')
        y += _PANEL_HEAD
        top = max((ms for _, ms in bars), default=0.0) or 1.0
        for name, ms in bars:
            color = colors.setdefault(name, _COLORS[len(colors) % len(_COLORS)])
            w = max(ms / top * span, 1.0)
            out += [
                f'<text x="{_BAR_LABEL - 6}" y="{y + 12}" text-anchor="end" font-size="11">'
                f"{escape(name)}</text>",
                f'<rect class="bar" x="{_BAR_LABEL}" y="{y + 2}" width="{w:.1f}" height="{_BAR_H - 4}" '
                f'fill="{color}"><title>{escape(name)} @ {escape(shape)}: {ms:.4g} ms</title></rect>',
                f'<text x="{_BAR_LABEL + w + 4:.1f}" y="{y + 12}" font-size="11">{ms:.4g} ms</text>',
            ]
            y += _BAR_H
        y += 8
    out.append("</svg>")
    return "\n".join(out)
