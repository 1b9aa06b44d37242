"""``sagebuild bench``: PyTorch SDPA, our kernels and the peers a user could pick, timed together
with their accuracy against the float32 reference, and a gate.

One module per concern: ``config`` (``BenchConfig``, the profile's bench section plus the run's
choices), ``memory`` (what a run needs, refused before allocating), ``timing`` (interleaved rounds,
cold, back-to-back, sustained, CUDA-graph replay; usable on its own), ``providers`` (the
``Provider`` type, SDPA and ours), ``peers`` (``--against``), ``gate``, ``result`` and ``run``
(``run_bench``, composing them). On a CPU the golden model is timed, labelled so and not
speed-gated; accuracy bounds apply everywhere. Importing this package imports no torch.
"""

from sagebuild.bench.config import (
    DTYPES,
    LAYOUTS,
    BenchConfig,
    check_inputs,
    config_from_profile,
    parse_against,
    parse_int_list,
    parse_varlen,
)
from sagebuild.bench.gate import compare_variants, expectation_for, gate, gate_key, packed_key
from sagebuild.bench.providers import Provider, packed_call, packed_segments, sdpa_backend, sdpa_call
from sagebuild.bench.result import BenchResult, BenchRow
from sagebuild.bench.run import attention_flops, random_qkv, run_bench
from sagebuild.bench.timing import Timing, median_ms, time_interleaved, time_named
from sagebuild.benchrecord import AUTO, GATE_METRICS, SDPA, describe, packed_lengths

__all__ = [
    "AUTO",
    "DTYPES",
    "GATE_METRICS",
    "LAYOUTS",
    "SDPA",
    "BenchConfig",
    "BenchResult",
    "BenchRow",
    "Provider",
    "Timing",
    "attention_flops",
    "check_inputs",
    "compare_variants",
    "config_from_profile",
    "describe",
    "expectation_for",
    "gate",
    "gate_key",
    "median_ms",
    "packed_call",
    "packed_key",
    "packed_lengths",
    "packed_segments",
    "parse_against",
    "parse_int_list",
    "parse_varlen",
    "random_qkv",
    "run_bench",
    "sdpa_backend",
    "sdpa_call",
    "time_interleaved",
    "time_named",
]
