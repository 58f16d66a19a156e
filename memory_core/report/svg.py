"""Inline SVG bar charts written in plain Python: the report needs no plotting library.

A static report must open anywhere (a laptop, an air-gapped server, a CI artifact) without a
JavaScript bundle or matplotlib; a few stacked bars per run say what the operators need.
Colours are fixed per series name so one status has one colour in every chart.
"""

from __future__ import annotations

import math
from html import escape

__all__ = ["colour", "stacked_bars"]

_PALETTE = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
]  # fmt: skip
_FIXED = {
    "active": "#59a14f",
    "expired": "#edc948",
    "superseded": "#b07aa1",
    "revoked": "#e15759",
    "deleted": "#9c755f",
    "compacted": "#76b7b2",
    "pending_score": "#bab0ac",
    "pending_review": "#f28e2b",
    "approved": "#4e79a7",
    "promoted": "#59a14f",
    "rejected": "#e15759",
    "auto_rejected": "#ff9da7",
}


def colour(name: str, index: int) -> str:
    """The series' colour: fixed for known statuses, else from the palette by position."""
    return _FIXED.get(name.rsplit(".", 1)[-1], _PALETTE[index % len(_PALETTE)])


def _nice_max(value: float) -> float:
    """A round axis maximum at or above ``value`` (1, 2, 4, 8 x 10^k)."""
    if value <= 0:
        return 1.0
    exp = math.floor(math.log10(value))
    for step in (1, 2, 4, 8, 10):  # quarters of these are round tick values
        top = step * 10**exp
        if top >= value:
            return float(top)
    return float(10 ** (exp + 1))


def _fmt(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1000:
        return f"{value / 1000:g}k"
    if value == int(value):
        return str(int(value))
    return f"{value:.2g}" if value < 1 else f"{value:.1f}"


def stacked_bars(
    categories: list[str],
    series: dict[str, list[float]],
    *,
    title: str,
    unit: str = "",
    width: int = 560,
    height: int = 260,
) -> str:
    """One bar per category, stacked by series; a legend below. Empty input says so."""
    names = [n for n, values in series.items() if any(v for v in values)]
    if not categories or not names:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="44" '
            f'role="img" aria-label="{escape(title)}" font-family="system-ui, sans-serif" '
            f'font-size="11"><text x="8" y="16" font-size="13" font-weight="600">'
            f'{escape(title)}</text><text x="8" y="36" fill="#888">no data yet</text></svg>'
        )
    slot_w = (width - 64) / len(categories)
    longest = max(len(c) for c in categories) * 6.2
    rotate = longest > slot_w - 4
    label_h = longest * 0.5 + 18 if rotate else 20
    left, right, top = 52, 12, 28
    plot_h = height - top - 20 - 40
    legend_y = top + plot_h + label_h + 14
    per_row = 3 if max(len(n) for n in names) <= 24 else 2
    legend_rows = math.ceil(len(names) / per_row)
    total_h = int(legend_y + legend_rows * 18)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" '
        f'viewBox="0 0 {width} {total_h}" role="img" aria-label="{escape(title)}" '
        'font-family="system-ui, sans-serif" font-size="11">',
        f'<text x="{left}" y="16" font-size="13" font-weight="600">{escape(title)}</text>',
    ]
    plot_w = width - left - right
    totals = [sum(series[n][i] or 0 for n in names) for i in range(len(categories))]
    ymax = _nice_max(max(totals))
    for k in range(5):
        value = ymax * k / 4
        y = top + plot_h - plot_h * k / 4
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#e5e5e5"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#555">'
            f"{_fmt(value)}</text>"
        )
    if unit:
        out.append(
            f'<text x="12" y="{top + plot_h / 2}" transform="rotate(-90 12 {top + plot_h / 2})" '
            f'text-anchor="middle" fill="#555">{escape(unit)}</text>'
        )
    slot = plot_w / len(categories)
    bar = max(2.0, min(48.0, slot * 0.7))
    for i, cat in enumerate(categories):
        x = left + slot * i + (slot - bar) / 2
        base = top + plot_h
        for j, name in enumerate(names):
            value = series[name][i] or 0
            if value <= 0:
                continue
            h = plot_h * value / ymax
            base -= h
            out.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{colour(name, j)}"><title>{escape(cat)} · {escape(name)}: '
                f"{_fmt(value)}</title></rect>"
            )
        if len(categories) <= 12 or i % math.ceil(len(categories) / 12) == 0:
            lx, ly = left + slot * i + slot / 2, top + plot_h + 14
            turn = f' transform="rotate(-30 {lx:.1f} {ly:.1f})"' if rotate else ""
            anchor = "end" if rotate else "middle"
            out.append(
                f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}" fill="#333"{turn}>'
                f"{escape(cat)}</text>"
            )
    out.append(
        f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" '
        'stroke="#999"/>'
    )
    for j, name in enumerate(names):
        col, row = j % per_row, j // per_row
        lx, ly = left + col * (plot_w / per_row), legend_y + row * 18
        out.append(
            f'<rect x="{lx:.1f}" y="{ly - 9:.1f}" width="10" height="10" '
            f'fill="{colour(name, j)}"/>'
            f'<text x="{lx + 14:.1f}" y="{ly:.1f}" fill="#333">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)
