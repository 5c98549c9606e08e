"""Train the LDWP model that ships with streamplace (``placement/models/``), reproducibly.

    python -m benchmarks.ship_models            # about 15 minutes on 2 cores

The residual LDWP variant of ``benchmarks/ldwp.py`` (starts as MCT, learns online on saturated
TRAINING seeds of the paper cluster with the HEFT node scheduler, keeps the checkpoint with the
best saturated throughput on the TUNING seeds; never the evaluation seeds). Same seeds, same
code, same file: the model file's metadata records the command, the seeds and the checkpoint.
``benchmarks/zoo.py`` and users of the simulator start from this file::

    from placement.ldwp.agent import LDWPPolicy
    agent = LDWPPolicy.from_file(SHIPPED_RESIDUAL, cluster, costs)
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from pathlib import Path

from placement.ldwp.shipped import SHIPPED_MODELS

MODELS = Path(__file__).resolve().parent.parent / "placement" / "models"
SHIPPED_RESIDUAL = MODELS / SHIPPED_MODELS["residual"]
#: As benchmarks/ldwp.py: 8 saturated training episodes of 1,500 tasks.
EPISODES, TASKS = 8, 1500


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=EPISODES)
    parser.add_argument("--out", type=Path, default=SHIPPED_RESIDUAL)
    args = parser.parse_args(argv)
    from benchmarks.ldwp import train_residual
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ship-models-") as tmp:
        trained = train_residual(("residual", True, args.episodes, TASKS, tmp))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(trained["model"], args.out)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, sha256 {digest[:16]}) in "
          f"{time.perf_counter() - started:.0f} s; checkpoint episode "
          f"{trained['chosen_episode']}, tuning throughput "
          f"{[c['tuning_throughput_per_min'] for c in trained['checkpoints']]}")


if __name__ == "__main__":
    main()
