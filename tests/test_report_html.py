"""The HTML report renders in any browser: no emoji (stock Chromium on Debian draws empty boxes)."""

from __future__ import annotations

from test_report import sample_report


def test_html_report_has_no_emoji():
    """Stock Chromium on Debian draws emoji as empty boxes: the HTML report marks status with words."""
    import re

    from sagebuild.report.render import to_html

    report = sample_report()
    result = {"variant": "qk_int8_pv_fp16", "ok": True, "problems": [], "accuracy": None, "bounds": None}
    report["verify"] = {
        "mode": "golden",
        "device": "cpu",
        "note": "golden model",
        "shape": [1, 1, 64, 64],
        "dtype": "float16",
        "results": [result],
    }
    html = to_html(report)
    assert '<td class="ok">ok</td>' in html
    assert not re.search("[\u2600-\u27bf\U0001f300-\U0001faff]", html)
