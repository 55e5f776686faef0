"""Every chain count works for every kind of target (the SMC start splits chains into islands)."""

import pytest
from helpers import write_tiny_plugin

from probe_core.cli import main
from probe_core.sampling.smc import MIN_ISLAND_SIZE, island_count

pytestmark = pytest.mark.slow  # trains models or runs long steps: left out of make test-fast


def test_island_count_divides_every_chain_count_the_pages_accept_into_large_enough_islands():
    for chains in range(1, 1025):
        islands = island_count(chains, 4)
        assert 1 <= islands <= 4 and chains % islands == 0, chains
        assert islands == 1 or chains // islands >= MIN_ISLAND_SIZE, chains


def test_every_chain_count_from_1_to_40_samples_ambiguous_vector_and_path_targets(tmp_path, capsys):
    plugin = str(write_tiny_plugin(tmp_path))
    common = ["--workspace", str(tmp_path / "ws"), "--device", "cpu", "sample", "--classifier", plugin,
              "--generator", plugin, "--warmup", "2", "--samples", "2"]
    from probe_core.runs.runconfig import result_of
    from probe_core.runs.workspace import Workspace

    store = Workspace(tmp_path / "ws").store
    for chains in range(1, 41):
        target = ("ambiguous:4,9", "probs:8=0.7,9=0.3", "path:8->9:3")[chains % 3]
        code = main(common + ["--target", target, "--chains", str(chains)])
        assert code == 0, f"--chains {chains} --target {target}: {capsys.readouterr().err}"
        run = store.list_runs(kind="sample", limit=1)[0]
        result = result_of(run)
        # the count asked for is what was requested, run and stored: every target has that many chains, and
        # every chain stored its samples (2 each)
        assert run.config["chains"] == chains and result.chains_per_target == chains, (chains, target)
        samples = store.get_samples(run.id)
        for index, report in enumerate(result.targets):
            assert report["summary"]["chains"] == chains, (chains, target, index)
            mine = [s for s in samples if s["target_index"] == report.get("target_index", index)]
            assert len({s["chain"] for s in mine}) == chains and len(mine) == 2 * chains, (chains, target, index)
