"""``graftbench flywheel``: the flywheel over rounds (the library grows from the model's own verified samples)."""

from __future__ import annotations

import json

import typer

from ..engine.registry import DEFAULT_ENGINE
from ..settings import DEFAULT_CHUNK_SIZE, DEFAULT_MODEL, DEFAULT_RUNS_DIR, ModelOptions, RoundsSettings
from .common import announce_sandbox, console, fail, open_model, stage_progress
from .options import (EVAL, ChunkSizeArg, DeviceArg, DtypeArg, EngineArg, FlashAttnArg, IsaArg, KvTypeArg,
                      MaxNewTokensArg, ModeArg, ModelArg, RunPrefixArg, RunsDirArg, SeedArg, TopPArg)

ROUNDS = RoundsSettings()


def flywheel(
    model: ModelArg = DEFAULT_MODEL, dtype: DtypeArg = "auto", chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE,
    isa: IsaArg = None, device: DeviceArg = "auto", engine: EngineArg = DEFAULT_ENGINE, kv_type: KvTypeArg = "f16",
    flash_attn: FlashAttnArg = None, runs_dir: RunsDirArg = DEFAULT_RUNS_DIR,
    store: str = typer.Option("store-rounds", "--store", envvar="GRAFTBENCH_ROUNDS_STORE",
                              help="artifact store of this flywheel (created; holds only its deposits)"),
    rounds: int = typer.Option(ROUNDS.rounds, "--rounds", min=1, max=50, help="rounds after round 0"),
    per_family: int = typer.Option(ROUNDS.per_family, "--per-family", min=1, max=20,
                                   help="new built-in problems per family per round"),
    samples: int = typer.Option(ROUNDS.samples, "--samples", min=1, max=64, help="samples per problem (batched)"),
    temperature: float = typer.Option(ROUNDS.temperature, "--temperature", min=0.01, max=10.0,
                                      help="sampling temperature"),
    top_p: TopPArg = ROUNDS.top_p, seed: SeedArg = ROUNDS.seed,
    max_new_tokens: MaxNewTokensArg = ROUNDS.max_new_tokens,
    prefix: RunPrefixArg = ROUNDS.prefix,
    mode: ModeArg = EVAL.mode,
) -> None:
    """The flywheel over rounds: held-out baseline vs graft per round, recurring recall, the library growing from the model's own verified samples."""
    from ..eval.flywheel import rounds_summary, run_rounds
    from ..results.runs import RunError
    from ..programs.sandbox import SandboxError
    from .tables import rounds_tables

    sandbox = announce_sandbox(mode)
    settings = RoundsSettings(rounds=rounds, per_family=per_family, samples=samples, temperature=temperature,
                              top_p=top_p, seed=seed, max_new_tokens=max_new_tokens, prefix=prefix, mode=mode)
    session = open_model(ModelOptions(engine=engine, model=model, dtype=dtype, chunk_size=chunk_size, isa=isa,
                                      device=device, kv_type=kv_type, flash_attn=flash_attn))
    try:
        with stage_progress() as (advance, on_stage):
            results = run_rounds(session, settings, runs_root=runs_dir, store_root=store, on_sample=advance,
                                 on_stage=on_stage, on_item=advance, sandbox=sandbox)
    except (RunError, OSError, ValueError, SandboxError) as exc:  # OSError includes StorageError and StoreError
        fail(str(exc))
    summary = rounds_summary(results, settings)
    for table in rounds_tables(summary, title=f"flywheel over {rounds} rounds ({model})"):
        console.print(table)
    path = f"{runs_dir}/{prefix}-summary.json"
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=1, sort_keys=True)
    console.print(f"summary: {path}; plot the curve with graftbench report {runs_dir}/{prefix}-r*-baseline "
                  f"{runs_dir}/{prefix}-r*-graft (each run's round is its settings.round)")
