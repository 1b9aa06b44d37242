"""JUnit XML (CI systems show it natively): every accept step, doctor check, verified variant
and bench row as one test case."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any


def _case(
    suite: ET.Element, name: str, status: str, message: str = "", text: str = "", seconds: float | None = None
) -> None:
    """One test case, classed under its suite's name."""
    classname = suite.get("name", "")
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds or 0.0:.3f}")
    if status == "fail":
        ET.SubElement(case, "failure", message=message[:500], type="failure").text = text or message
    elif status == "skip":
        ET.SubElement(case, "skipped", message=message[:500])
    elif text:
        ET.SubElement(case, "system-out").text = text


def to_junit(report: dict[str, Any]) -> str:
    root = ET.Element("testsuites", name="sagebuild accept")
    _steps(ET.SubElement(root, "testsuite", name="sagebuild.steps"), report["steps"])
    _checks(ET.SubElement(root, "testsuite", name="sagebuild.doctor"), report["checks"])
    if report.get("verify"):
        _verify(ET.SubElement(root, "testsuite", name="sagebuild.verify"), report["verify"])
    if report.get("bench"):
        _bench(ET.SubElement(root, "testsuite", name="sagebuild.bench"), report["bench"])
    _count(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _steps(suite: ET.Element, steps: list[dict[str, Any]]) -> None:
    """One case per accept step: its error and the explanations' causes and fixes."""
    for s in steps:
        expl = "\n".join(f"{m['title']}: {m['cause']}\nfix: {m['fix']}" for m in s["explanation"])
        text = "\n\n".join(x for x in (s.get("error") or "", expl) if x)
        _case(suite, s["name"], s["status"], s["summary"], text or s["summary"], s["seconds"])


def _checks(suite: ET.Element, checks: list[dict[str, Any]]) -> None:
    """One case per doctor check; a warning passes, its message kept as output."""
    for c in checks:
        msg = c["detail"] + (f" — fix: {c['fix']}" if c.get("fix") else "")
        status = "ok" if c["status"] == "warn" else c["status"]
        _case(suite, c["id"], status, msg, msg if c["status"] == "warn" else "")


def _verify(suite: ET.Element, verify: dict[str, Any]) -> None:
    """One case per verified variant."""
    for r in verify["results"]:
        msg = "; ".join(r["problems"]) + (f" — fix: {r['fix']}" if r.get("fix") else "")
        _case(suite, r["variant"], "ok" if r["ok"] else "fail", msg, msg, r.get("seconds"))


def _bench(suite: ET.Element, bench: dict[str, Any]) -> None:
    """One case per gated row, failed by the gate's failures that name it."""
    failures = bench["gate"]["failures"]
    for r in bench["rows"]:
        if r["kind"] in ("baseline", "peer"):  # the baseline and the peers are measured, not gated
            continue
        name = f"{r['provider']}[{r['kind']}] seq={r['seq']}"
        mine = [f for f in failures if f.startswith(f"{r['provider']} ") and f"seq={r['seq']}" in f]
        _case(suite, name, "fail" if mine else "ok", "; ".join(mine), "; ".join(mine))


def _count(root: ET.Element) -> None:
    """Each suite's and the whole run's tests, failures, skips and time, as CI systems read them."""
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
        suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
        suite.set("errors", "0")
        suite.set("time", f"{sum(float(c.get('time', 0)) for c in cases):.3f}")
    for key in ("tests", "failures", "skipped", "errors"):
        root.set(key, str(sum(int(s.get(key, 0)) for s in root.findall("testsuite"))))
