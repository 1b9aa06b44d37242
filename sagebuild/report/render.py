"""The report as Markdown (a CI job summary) and as one self-contained HTML page: views of
``report.json`` that add no facts of their own."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from sagebuild.benchrecord import GATE_METRICS, describe, provider_notes
from sagebuild.report.svg import speedup_chart, time_chart

_ICON = {"ok": "✅", "fail": "❌", "warn": "⚠️", "skip": "⏭️"}


def _f(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1e-3 and v != 0 else f"{v:.{digits}f}"
    return str(v)


def _gate_metric(bench: dict[str, Any] | None) -> str:
    """The speed-up the report's gate compared ("cold" in reports written before it was named)."""
    return ((bench or {}).get("gate") or {}).get("metric", "cold")


def speedup_series(bench: dict[str, Any] | None) -> dict[str, list[tuple[int, float]]]:
    """Provider → [(seq, speed-up)]: the speed-up the gate compared, so the chart's gate line fits."""
    key = GATE_METRICS[_gate_metric(bench)]
    series: dict[str, list[tuple[int, float]]] = {}
    for row in (bench or {}).get("rows", []):
        if row["kind"] != "baseline" and row.get(key) is not None:
            series.setdefault(_label(row), []).append((row["seq"], float(row[key])))
    return series


def time_series(bench: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    """Shape (``seq=N``) → [(provider, median ms)] of every timed row: the time chart's bars."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for row in bench.get("rows", []):
        if row.get("timing"):
            groups.setdefault(f"seq={row['seq']}", []).append(
                (_label(row), float(row["timing"]["median_ms"]))
            )
    return groups


def _label(row: dict[str, Any]) -> str:
    """How a row names its provider (records written before rows had labels: the provider)."""
    return row.get("label") or row["provider"] + (" (kernel only)" if row["kind"] == "kernel_only" else "")


def chart_title(bench: dict[str, Any] | None) -> str:
    if bench and bench.get("timing_kind") == "cpu":
        return "Speed-up vs SDPA — CPU timings (golden model), not a GPU result"
    if _gate_metric(bench) == "sustained":
        return "Speed-up vs SDPA (sustained: back-to-back calls at the power limit)"
    return "Speed-up vs SDPA (median time ratio)"


def plan_text(plan: dict[str, Any] | None) -> str:
    """A bench row's launch plan in a few words: "fp8 mma-acc 64,128,4,3 K128", "–" for none."""
    if not plan:
        return "–"
    parts = [plan["variant"].rsplit("_", 1)[-1]]
    if plan.get("pv_accum") == "fp32":
        parts.append("mma-acc")
    cfg = plan["config"]
    parts.append(",".join(map(str, cfg)) if isinstance(cfg, (list, tuple)) else str(cfg))
    parts.append(f"K{plan['k_blk']}")
    if plan.get("split_head_dim"):
        parts.append("split")
    if plan["quantization"] != "triton":
        parts.append(f"quant:{plan['quantization']}")
    for flag in ("pdl", "v_key_order"):
        if plan.get(flag):
            parts.append(flag.replace("_", "-"))
    if plan.get("row_sum_parts", 1) > 1:
        parts.append(f"l/{plan['row_sum_parts']}")
    return " ".join(parts)


def bench_table(bench: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """A bench result's rows as text cells (the report's tables and ``sagebuild bench``'s)."""
    head = ["seq", "provider", "kind", "kernel", "median ms", "p20–p80 ms", "back-to-back ms", "sustained ms",
            "TFLOPS", "speed-up", "cos", "rel L1", "RMSE", "max abs"]  # fmt: skip
    rows = []
    for r in bench["rows"]:
        t, a = r.get("timing"), r.get("accuracy") or {}
        speedup = _f(r.get("speedup"), 3) + ("×" if r.get("speedup") is not None else "")
        if r.get("vs_expected"):
            speedup += f" ({r['vs_expected']:.2f} of {r['expected_speedup']:.2f}×)"
        rows.append(
            [
                str(r["seq"]),
                r.get("label") or r["provider"],
                r["kind"],
                plan_text(r.get("plan")) if not (r.get("plan") or {}).get("sdpa") else r.get("ran") or "–",
                _f(t and t["median_ms"]),
                f"{_f(t['p20_ms'])}–{_f(t['p80_ms'])}" if t else "–",
                _f(t and t.get("back_to_back_ms")),
                _f(t and t.get("sustained_ms"))
                + (f" ({r['sustained_speedup']:.3f}×)" if r.get("sustained_speedup") is not None else ""),
                f"{r['tflops']:.3g}" if r.get("tflops") is not None else "–",
                speedup,
                _f(a.get("cos"), 6),
                _f(a.get("rel_l1")),
                _f(a.get("rmse")),
                _f(a.get("max_abs")),
            ]
        )
        if r.get("error"):
            rows[-1][head.index("median ms")] = "error: " + r["error"].splitlines()[0][:80]
    for name in ("back-to-back ms", "sustained ms"):  # measured on GPUs only (sustained: --sustain)
        col = head.index(name)
        if all(row[col] == "–" for row in rows):
            head.pop(col)
            for row in rows:
                row.pop(col)
    return head, rows


def _steps_table(report: dict[str, Any], icons: bool = True) -> tuple[list[str], list[list[str]]]:
    """The accept steps; ``icons`` as in ``_verify_table``."""
    head = ["step", "result" if icons else "status", "exit", "seconds", "summary"]
    rows = []
    for s in report["steps"]:
        status = f"{_ICON[s['status']]} {s['status']}" if icons else s["status"]
        rows.append([s["name"], status, str(s["exit_code"]), _f(s["seconds"], 1), s["summary"]])
    return head, rows


def _verify_table(verify: dict[str, Any], icons: bool = True) -> tuple[list[str], list[list[str]]]:
    """The verify results; ``icons``: emoji (Markdown) or words (HTML: Debian's stock Chromium has
    no colour-emoji font)."""
    head = ["variant", "result", "cos (min)", "rel L1 (max)", "problems / fix"]
    rows = []
    for r in verify["results"]:
        a, b = r.get("accuracy") or {}, r.get("bounds") or {}
        note = "; ".join(r["problems"]) + (f" → fix: {r['fix']}" if r.get("fix") else "")
        status = "ok" if r["ok"] else "fail"
        rows.append(
            [
                r["variant"],
                _ICON[status] if icons else status,
                f"{_f(a.get('cos'), 6)} ({_f(b.get('cos_min'), 6)})",
                f"{_f(a.get('rel_l1'))} ({_f(b.get('rel_l1_max'))})",
                note or "–",
            ]
        )
    return head, rows


# ---- Markdown -------------------------------------------------------------------------------


def tune_table(tune: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """``accept --tune``'s classes: the shipped table's pick against the tuned one, beside SDPA."""
    head = ["class", "shipped (table)", "shipped ms", "tuned", "tuned ms", "SDPA ms", "shipped / tuned"]
    rows = []
    for c in tune["classes"]:
        gain = c["shipped_ms"] / c["tuned_ms"] if c.get("shipped_ms") and c.get("tuned_ms") else None
        label = c["class"] + (f" ({c['label']})" if c.get("label") else "")
        rows.append([
            label, c["shipped"] or "–", _f(c["shipped_ms"]), c["tuned"] or "–", _f(c["tuned_ms"]),
            _f(c["sdpa_ms"]), f"{gain:.2f}×" if gain else "–",
        ])  # fmt: skip
    return head, rows


def tune_notes(tune: dict[str, Any]) -> list[str]:
    """What the tune section says under its table: the run's time, skipped classes, the record."""
    notes = [f"tuned in {tune['seconds']:g} s (budget {tune['budget_s']:g} s) into {tune.get('record')}"]
    notes += [f"not tuned: {s['class']}: {s['why']}" for s in tune["skipped"]]
    return notes + ([tune["note"]] if tune.get("note") else [])


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return out


def _md_bench(b: dict[str, Any]) -> list[str]:
    """The report's bench section in Markdown: the table, the providers that did not run, the gate."""
    lines: list[str] = []
    label = "CPU timings — not a GPU result" if b["timing_kind"] == "cpu" else f"GPU: {b.get('device_name')}"
    lines += [
        "",
        f"### Bench ({label})",
        "",
        f"Shape: {describe(b['config'])}. SDPA backend: **{b['sdpa_backend']['name']}** "
        f"({b['sdpa_backend']['how']}); timing: {b['method']}. {b['note']}",
        "",
    ]
    lines += _md_table(*bench_table(b))
    notes = provider_notes(b)
    lines += ["", *(f"- {line}" for line in notes)] if notes else []
    g = b["gate"]
    # the regression gate's note (or why there is none), then the explicit gate
    gates = [(g.get("expectation") or {}).get("note")]
    if g.get("min_speedup", 0) > 0:
        gates.append(f"explicit gate: speed-up over SDPA ≥ {g['min_speedup']:g}×")
    gate_s = "; ".join(filter(None, gates)) or (
        "speed gate applied" if g["speed_gate_applied"] else "no speed gate"
    )
    if g["speed_gate_applied"] and _gate_metric(b) != "cold":
        gate_s += f" ({_gate_metric(b)})"
    verdict = "below threshold: " + "; ".join(g["failures"]) if g["failures"] else "all within thresholds"
    lines += ["", f"Gate: {gate_s}; {verdict}"]
    return lines


def to_markdown(report: dict[str, Any]) -> str:
    """A compact summary for ``$GITHUB_STEP_SUMMARY`` / a merge-request comment."""
    verdict = "passed" if report["ok"] else f"FAILED (exit {report['exit_code']})"
    lines = [
        f"## sagebuild accept: {_ICON['ok' if report['ok'] else 'fail']} {verdict}",
        "",
        f"Profile **{report['profile']['name']}** ({report['profile']['why']}) · "
        f"sagebuild {report['sagebuild_version']} · {report['created']}",
        "",
    ]
    lines += _md_table(*_steps_table(report))
    checks = report["checks"]
    counts = ", ".join(f"{sum(c['status'] == k for c in checks)} {k}" for k in ("ok", "warn", "fail", "skip"))
    lines += ["", f"### Doctor: {counts}"]
    bad = [c for c in checks if c["status"] in ("fail", "warn")]
    if bad:
        lines += [""] + _md_table(
            ["check", "status", "detail", "fix"],
            [
                [c["title"], f"{_ICON[c['status']]} {c['status']}", c["detail"], c.get("fix") or "–"]
                for c in bad
            ],
        )
    for s in report["steps"]:
        for m in s["explanation"]:
            lines += ["", f"**{s['name']} failed — {m['title']}**: {m['cause']}  ", f"fix: `{m['fix']}`"]
    if report.get("verify"):
        v = report["verify"]
        lines += [
            "",
            f"### Verify ({v['mode']}, {v['device']}, {'×'.join(map(str, v['shape']))} {v['dtype']})",
            "",
            f"_{v['note']}_",
            "",
        ]
        lines += _md_table(*_verify_table(v))
    if report.get("tune"):
        t = report["tune"]
        lines += ["", f"### Tune ({t.get('device_name')}): the shipped table against the tuned choice", ""]
        lines += _md_table(*tune_table(t)) + [""] + [f"- {n}" for n in tune_notes(t)]
    if report.get("bench"):
        lines += _md_bench(report["bench"])
    files = [f"`{k}`: {v}" for k, v in report["files"].items() if v]
    if files:
        lines += ["", "Files: " + " · ".join(files)]
    return "\n".join(lines) + "\n"


# ---- HTML -----------------------------------------------------------------------------------

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1700px;color:#222}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f4f4f4}.ok{color:#186a18}.fail{color:#b00}.warn{color:#a60}.skip{color:#777}
.bench{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}
code,pre{background:#f6f6f6}pre{padding:.6em;overflow:auto;font-size:12px}"""


def _html_table(head: list[str], rows: list[list[str]], status_col: int | None = None) -> str:
    def td(i: int, c: str) -> str:
        cls = f' class="{escape(c.split()[-1])}"' if i == status_col and c else ""
        return f"<td{cls}>{escape(c)}</td>"

    out = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(td(i, c) for i, c in enumerate(r)) + "</tr>" for r in rows]
    return "\n".join([*out, "</table>"])


def to_html(report: dict[str, Any]) -> str:
    """One self-contained page (inline CSS and SVG; no scripts, no external assets)."""
    ok = report["ok"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>sagebuild report — {escape(report['profile']['name'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f'<h1>sagebuild accept: <span class="{"ok" if ok else "fail"}">'
        f"{'passed' if ok else 'FAILED (exit ' + str(report['exit_code']) + ')'}</span></h1>",
        f"<p>Profile <b>{escape(report['profile']['name'])}</b> ({escape(report['profile']['why'])}) · "
        f"sagebuild {escape(report['sagebuild_version'])} · {escape(report['created'])}</p>",
        "<h2>Steps</h2>",
        _html_table(*_steps_table(report, icons=False), status_col=1),
    ]
    for s in report["steps"]:
        if s["error"]:
            parts.append(f"<h3>{escape(s['name'])}: error</h3><pre>{escape(s['error'][-4000:])}</pre>")
        for m in s["explanation"]:
            parts.append(
                f"<p><b>{escape(m['title'])}</b>: {escape(m['cause'])}<br>fix: "
                f"<code>{escape(m['fix'])}</code></p>"
            )
    b = report.get("bench")
    gate = b["gate"]["min_speedup"] if b and b["gate"]["speed_gate_applied"] else None
    parts += ["<h2>Speed-up</h2>", speedup_chart(speedup_series(b), chart_title(b), gate)]
    if b:
        kind = (
            "CPU timings — not a GPU result" if b["timing_kind"] == "cpu" else f"GPU {b.get('device_name')}"
        )
        parts += [
            f"<h2>Bench ({escape(kind)})</h2>",
            f"<p>Shape: {escape(describe(b['config']))}. SDPA backend: "
            f"<b>{escape(b['sdpa_backend']['name'])}</b> ({escape(b['sdpa_backend']['how'])}). "
            f"Timing: {escape(b['method'])}. {escape(b['note'])}</p>",
            '<div class="bench">',
            _html_table(*bench_table(b)),
            time_chart(time_series(b), "Time per call by provider and shape (median ms; lower is faster)"),
            "</div>",
        ]
        notes = provider_notes(b)
        if notes:
            parts.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in notes) + "</ul>")
        if b["gate"]["failures"]:
            parts.append(
                '<p class="fail">Below threshold: ' + escape("; ".join(b["gate"]["failures"])) + "</p>"
            )
    t = report.get("tune")
    if t:
        parts += [
            f"<h2>Tune ({escape(str(t.get('device_name')))}): the shipped table against the tuned one</h2>",
            _html_table(*tune_table(t)),
            "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in tune_notes(t)) + "</ul>",
        ]
    v = report.get("verify")
    if v:
        parts += [
            f"<h2>Verify ({escape(v['mode'])} on {escape(v['device'])})</h2>",
            f"<p>{escape(v['note'])}</p>",
            _html_table(*_verify_table(v, icons=False), status_col=1),
        ]
    parts += [
        "<h2>Doctor checks</h2>",
        _html_table(
            ["check", "status", "detail", "fix"],
            [[c["title"], c["status"], c["detail"], c.get("fix") or ""] for c in report["checks"]],
            status_col=1,
        ),
        "<h2>Files</h2><ul>"
        + "".join(
            f"<li>{escape(k)}: <code>{escape(str(p))}</code></li>" for k, p in report["files"].items() if p
        )
        + "</ul>",
    ]
    if report.get("facts") is not None:
        parts.append(
            "<details><summary>Probe facts</summary><pre>"
            + escape(json.dumps(report["facts"], indent=2, default=str))
            + "</pre></details>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
