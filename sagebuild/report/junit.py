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
    steps = ET.SubElement(root, "testsuite", name="sagebuild.steps")
    for s in report["steps"]:
        expl = "\n".join(f"{m['title']}: {m['cause']}\nfix: {m['fix']}" for m in s["explanation"])
        text = "\n\n".join(x for x in (s.get("error") or "", expl) if x)
        _case(steps, s["name"], s["status"], s["summary"], text or s["summary"], s["seconds"])
    checks = ET.SubElement(root, "testsuite", name="sagebuild.doctor")
    for c in report["checks"]:
        msg = c["detail"] + (f" — fix: {c['fix']}" if c.get("fix") else "")
        status = "ok" if c["status"] == "warn" else c["status"]
        _case(checks, c["id"], status, msg, msg if c["status"] == "warn" else "")
    if report.get("verify"):
        vs = ET.SubElement(root, "testsuite", name="sagebuild.verify")
        for r in report["verify"]["results"]:
            msg = "; ".join(r["problems"]) + (f" — fix: {r['fix']}" if r.get("fix") else "")
            _case(vs, r["variant"], "ok" if r["ok"] else "fail", msg, msg, r.get("seconds"))
    if report.get("bench"):
        bs = ET.SubElement(root, "testsuite", name="sagebuild.bench")
        failures = report["bench"]["gate"]["failures"]
        for r in report["bench"]["rows"]:
            if r["kind"] in ("baseline", "peer"):  # the baseline and the peers are measured, not gated
                continue
            name = f"{r['provider']}[{r['kind']}] seq={r['seq']}"
            mine = [f for f in failures if f.startswith(f"{r['provider']} ") and f"seq={r['seq']}" in f]
            _case(bs, name, "fail" if mine else "ok", "; ".join(mine), "; ".join(mine))
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
        suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
        suite.set("errors", "0")
        suite.set("time", f"{sum(float(c.get('time', 0)) for c in cases):.3f}")
    for key in ("tests", "failures", "skipped", "errors"):
        root.set(key, str(sum(int(s.get(key, 0)) for s in root.findall("testsuite"))))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
