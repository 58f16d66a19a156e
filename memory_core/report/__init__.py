"""The static HTML report of a home's run history (``<home>/reports/index.html``).

Written by every nightly run (flows/nightly.py) and by ``memctl report``. Collecting reads
DuckDB and Lance (``collect.py``); rendering is plain Python with inline SVG (``render.py``,
``svg.py``), so the page opens offline, in any browser, with no scripts.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from memory_core.report.collect import ReportData, collect_report, rows_by_status
from memory_core.report.render import render_html
from memory_core.stores import Stores

__all__ = ["ReportData", "collect_report", "report_path", "rows_by_status", "write_report"]


def report_path(home: Path) -> Path:
    return home / "reports" / "index.html"


def write_report(stores: Stores, home: Path, *, data: ReportData | None = None) -> Path:
    """Render the report and replace ``<home>/reports/index.html`` atomically."""
    html = render_html(data or collect_report(stores))
    path = report_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".index-", suffix=".html")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(html)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
