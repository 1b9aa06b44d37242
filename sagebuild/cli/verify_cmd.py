"""``sagebuild verify``: the minimal tensor smoke test for every kernel variant (exit 30 on failure)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sagebuild.cli.common import (
    JsonOpt,
    ProfileOpt,
    handle_errors,
    out,
    parse_shape,
    resolve_profile,
    respond,
)

_SHAPE_HELP = "B,H,N,D of the test tensors (the seed's check is 1,8,512,64)."


def render(res: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title=f"sagebuild verify — {res.mode} on {res.device}, {'×'.join(map(str, res.shape))} {res.dtype}",
        title_justify="left",
    )
    for col in ("variant", "result", "cos", "rel L1", "detail"):
        table.add_column(col)
    for r in res.results:
        a = r.accuracy or {}
        detail = "; ".join(r.problems) + (f"\nlikely cause: {r.cause}\nfix: {r.fix}" if r.fix else "")
        table.add_row(
            r.variant,
            "[green]ok[/]" if r.ok else "[bold red]FAIL[/]",
            f"{a['cos']:.6f}" if a.get("cos") is not None else "–",
            f"{a['rel_l1']:.5f}" if a.get("rel_l1") is not None else "–",
            escape(detail),
        )
    out.print(table)
    out.print(escape(res.note), highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("verify")
    @handle_errors
    def verify_cmd(
        profile: ProfileOpt = "auto",
        shape: Annotated[str, typer.Option("--shape", help=_SHAPE_HELP)] = "1,8,512,64",
        dtype: Annotated[str, typer.Option("--dtype", help="float16 or bfloat16.")] = "float16",
        device: Annotated[
            str,
            typer.Option(
                "--device", help="auto (the GPU if any, else the golden model on CPU), cuda, cuda:1, cpu."
            ),
        ] = "auto",
        causal: Annotated[bool, typer.Option("--causal/--no-causal", help="Causal mask.")] = False,
        layout: Annotated[str, typer.Option("--layout", help="HND (B,H,N,D) or NHD (B,N,H,D).")] = "HND",
        seed: Annotated[int, typer.Option("--seed", help="Random seed of the test tensors.")] = 0,
        json_out: JsonOpt = False,
        dry_run: Annotated[
            bool,
            typer.Option(
                "--dry-run", help="Print the plan per variant and the default's reason; run nothing."
            ),
        ] = False,
    ) -> None:
        """Run each kernel variant on small random tensors: shape, dtype, device, finite values and
        accuracy against the float32 reference within the profile's bounds. On a CPU-only machine
        the golden model runs (proves the algorithm and the install, not a GPU)."""
        from sagebuild.bench.memory import check_shape_fits
        from sagebuild.errors import Exit
        from sagebuild.verify import plan_text, run_verify, verify_plan

        dims = parse_shape(shape, "--shape")
        if not dry_run:
            check_shape_fits(dims, device)  # a shape that will not fit is refused before allocating
        prof, why = resolve_profile(profile)
        if dry_run:  # the plan for the profile's archs, without a GPU
            vplan = verify_plan(prof, dims, causal)
            doc = {"command": "verify", "dry_run": True, "profile_why": why, **vplan}
            return respond(json_out, doc, lambda: typer.echo(plan_text(vplan)))
        res = run_verify(prof, dims, dtype=dtype, device=device, seed=seed, causal=causal, layout=layout)
        doc = {"command": "verify", "profile": prof.name, "profile_why": why, **res.to_dict()}
        respond(json_out, doc, lambda: render(res), Exit.OK if res.ok else Exit.VERIFY_FAILED)
