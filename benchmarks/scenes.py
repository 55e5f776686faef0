"""Scene world speed: renderer throughput and random-walk Metropolis iterations, measured side by side.

Prints scenes rendered per second at 32x32 and 48x48 for several batch sizes, and the cost of
one RWM iteration (render + classify) for 64 chains against rendering alone, so the share of
the renderer in a probing run is visible. Run: ``.venv/bin/python benchmarks/scenes.py``.
"""

from __future__ import annotations

import time

import torch

from probe_core.models.architectures import CountingClassifier, ProbabilityModel
from probe_core.scenes.generator import CLASS_NAMES
from probe_core.scenes.render import render_scenes
from probe_core.scenes.world import ScenePrior


def rate(fn, count: int, repeats: int = 5) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return count * repeats / (time.perf_counter() - started)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="accepted for make bench-quick; the run is short already")
    parser.parse_args()
    torch.set_num_threads(2)
    prior = ScenePrior()
    scenes = prior.sample(4096, torch.Generator().manual_seed(0))
    print(f"{'image size':>10} {'batch':>6} {'scenes/s':>10}")
    for size in (32, 48):
        for batch in (1, 64, 1024, 4096):
            chunk = scenes[:batch]
            print(f"{size:>10} {batch:>6} {rate(lambda: render_scenes(chunk, 5, size), batch):>10,.0f}")
    classifier = ProbabilityModel(CountingClassifier((3, 32, 32), len(CLASS_NAMES)).eval(), "logits").eval()
    chains = scenes[:64]
    with torch.no_grad():
        render_only = rate(lambda: render_scenes(chains, 5, 32), 1)
        full = rate(lambda: classifier(render_scenes(chains, 5, 32)), 1)
    print(f"RWM iteration, 64 chains: {full:,.0f} iterations/s (render + classify); rendering alone "
          f"{render_only:,.0f}/s, so the renderer is {full / render_only:.0%} of the iteration time")


if __name__ == "__main__":
    main()
