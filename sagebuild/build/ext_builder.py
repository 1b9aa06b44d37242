"""The build subprocess, ``python -m sagebuild.build.ext_builder SPEC.json``: a fresh interpreter, so a
compiler crash, an OOM kill or a half-initialised torch never takes the caller down. It compiles the
spec's sources with ``torch.utils.cpp_extension.load`` (``MAX_JOBS`` and the arch variables from the
environment; hipified on ROCm); exit status 0 means ``<build_directory>/<name>.so`` built and loaded.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m sagebuild.build.ext_builder SPEC.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    t0 = time.monotonic()
    import torch
    from torch.utils import cpp_extension

    print(
        f"sagebuild: torch {torch.__version__} (cuda {torch.version.cuda}, hip {torch.version.hip}), "
        f"ninja {'yes' if cpp_extension.is_ninja_available() else 'NO (slow serial build)'}",
        flush=True,
    )
    cpp_extension.load(
        name=spec["name"],
        sources=spec["sources"],
        build_directory=spec["build_directory"],
        extra_cflags=spec.get("extra_cflags", []),
        extra_cuda_cflags=spec.get("extra_cuda_cflags", []),
        extra_include_paths=spec.get("include_paths", []),
        with_cuda=spec["with_cuda"],
        is_python_module=False,
        verbose=True,
    )
    print(f"sagebuild: built and loaded {spec['name']} in {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
