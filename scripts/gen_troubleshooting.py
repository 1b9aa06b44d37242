#!/usr/bin/env python3
"""Write docs/troubleshooting.md from the failure database (sagebuild/data/failures.yaml).

Usage: python scripts/gen_troubleshooting.py          # rewrite the doc
       python scripts/gen_troubleshooting.py --check  # exit 1 when the committed doc is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "troubleshooting.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail instead of writing when the doc is stale")
    args = parser.parse_args(argv)

    from sagebuild.explain import troubleshooting_markdown

    text = troubleshooting_markdown()
    current = DOC.read_text(encoding="utf-8") if DOC.exists() else None
    if args.check:
        if current != text:
            print(f"{DOC} is out of date: run python scripts/gen_troubleshooting.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
