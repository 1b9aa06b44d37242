"""``sagebuild bench``: SDPA vs the quantized kernels, timing and accuracy diff (exit 40 below the gate)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from sagebuild.cli.common import (
    JsonOpt,
    ProfileOpt,
    exit_with,
    handle_errors,
    out,
    path_option,
    print_error,
    resolve_profile,
    respond,
    with_bench_options,
)


def render(res: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    from sagebuild.report.render import bench_table

    d = res.to_dict()
    label = "CPU timings — not a GPU result" if res.timing_kind == "cpu" else f"GPU {res.device_name}"
    head, cells = bench_table(d)
    rows = [dict(zip(head, row)) for row in cells]
    for r, row in zip(d["rows"], rows):
        if r["timing"] is None:  # the message follows the table (a narrow terminal drops columns)
            row["median ms"] = "error"
    cols = list(head)
    if not any(r.get("plan") for r in d["rows"]):  # a kernel column only for GPU runs
        cols.remove("kernel")

    def width(col: str) -> int:
        return max([len(col)] + [len(row[col]) for row in rows])

    # A narrow terminal drops the spread, RMSE, max abs, TFLOPS and back-to-back columns (the JSON
    # and the report keep them) before any number would lose digits; words wrap.
    for optional in ("p20–p80 ms", "RMSE", "max abs", "TFLOPS", "back-to-back ms"):
        if optional in cols and sum(width(c) + 3 for c in cols) > out.width:
            cols.remove(optional)
    table = Table(title=f"sagebuild bench — {label}", title_justify="left")
    for col in cols:
        if col in ("provider", "kind", "kernel"):
            table.add_column(col, justify="left", overflow="fold")
        else:
            table.add_column(col, justify="right", no_wrap=True, min_width=width(col))
    for row in rows:
        table.add_row(*(escape(row[c]) for c in cols))
    out.print(table)
    for r in d["rows"]:
        if r["timing"] is None:
            what = f"{escape(r['provider'])} @ seq {r['seq']}: {escape(r['error'] or '')}"
            out.print(f"[red]error[/] {what}", highlight=False)
    from sagebuild.benchrecord import describe, provider_notes

    for line in provider_notes(d):
        out.print(f"provider: {escape(line)}", highlight=False)
    backend = f"SDPA backend: {res.sdpa_backend['name']} ({res.sdpa_backend['how']})"
    for line in (f"shape: {describe(d['config'])}", backend, f"timing: {res.method}", res.note):
        out.print(escape(line), highlight=False)
    for f in res.failures:
        out.print(f"[bold red]below threshold:[/] {escape(f)}", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("bench")
    @handle_errors
    @with_bench_options
    def bench_cmd(
        profile: ProfileOpt = "auto",
        bench: Any = None,  # the shared bench options: with_bench_options
        dtype: Annotated[Optional[str], typer.Option("--dtype", help="float16 or bfloat16.")] = None,
        layout: Annotated[str, typer.Option("--layout", help="HND or NHD.")] = "HND",
        seed: Annotated[int, typer.Option("--seed", help="Random seed of the inputs.")] = 0,
        device: Annotated[str, typer.Option("--device", help="auto, cuda, cuda:1 or cpu.")] = "auto",
        out_text: Annotated[
            Optional[str], typer.Option("--out", help="Also write the result as JSON here.")
        ] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Time PyTorch SDPA against sageattn and each kernel variant (median, p20/p80 of many runs after
        warm-up), with TFLOPS, speed-up, and the accuracy diff against the float32 reference."""
        import json

        from sagebuild import bench as bm
        from sagebuild.bench import memory as benchmem
        from sagebuild.console import interactive, status, steps
        from sagebuild.errors import SagebuildError
        from sagebuild.fsio import check_writable_file, write_text_atomic

        out_path = path_option(out_text, "--out")
        if out_path is not None:
            check_writable_file(out_path)  # a folder, /proc, a read-only mount: said before the run
        prof, why = resolve_profile(profile)
        cfg = bm.config_from_profile(prof, **bench, dtype=dtype, layout=layout, seed=seed)
        est = benchmem.check_fits(cfg, device)  # before anything is allocated (exit 3 if it won't fit)
        long_cpu = est.seconds is not None and est.seconds >= benchmem.LONG_RUN_S
        if long_cpu and not interactive(json_out):
            progress = steps("bench", json_out)  # a line per step with an ETA, even in a pipe or CI
        else:
            progress = status("benchmarking", json_out)
        with progress as say:
            res = bm.run_bench(
                prof, cfg, device=device, progress=benchmem.Eta(cfg, est, say) if say else None, fits=est
            )
        doc = {"command": "bench", "profile": prof.name, "profile_why": why, **res.to_dict()}
        try:
            if out_path is not None:
                write_text_atomic(out_path, json.dumps(doc, indent=2) + "\n")
        except SagebuildError as err:  # a full disk at the end: the finished bench is still shown
            respond(json_out, {**doc, "ok": False, "error": err.to_dict()}, lambda: render(res))
            print_error(err)
            exit_with(err.code)
        respond(json_out, doc, lambda: render(res), res.exit_code)
