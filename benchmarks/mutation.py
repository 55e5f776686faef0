"""Mutation score of the core modules: how many deliberately broken versions of the code the tests catch.

mutmut (https://github.com/boxed/mutmut) changes one operator, constant or call at a time in the modules below
and runs the tests that cover the changed function; a mutant is *killed* when a test fails. The score is
killed / (killed + survived); mutants that no test reaches are counted apart ("no tests"), and so are the
ones that ran past mutmut's time limit (counted as killed by mutmut, listed here as "timeout").

It runs in a throw-away copy of the working tree (mutmut writes a ``mutants/`` folder and its configuration
there), with the unit tests and the fast integration tests of the modules' behaviour. The result table is
printed per module, then the surviving mutants' names (``--show-survivors``); ``mutmut show NAME`` inside the
kept copy (``--keep``) prints one as a diff.

Run: ``.venv/bin/python benchmarks/mutation.py [--quick] [--modules a.py,b.py] [--keep DIR]``. ``--quick``
(CI's smoke run): the mutants of one function of the HMC kernel, with its unit tests. The figures in docs/testing.md come from the
full run, then ``--keep DIR --retest-survivors``: after tests were written for a run's survivors, the copy kept in DIR
takes the working tree's tests and mutmut tests again only the mutants that survived there or that no test reached
(tests are only ever added, so a mutant killed before stays killed); the table is then the two runs together.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The modules the suite's correctness rests on (issue 46): targets, the sampling kernels and the likelihood,
# Defuse correction and label aggregation, class matching, accounts.
CORE_MODULES = ("probe_core/sampling/targets.py", "probe_core/mcmc/hmc.py", "probe_core/mcmc/rwm.py",
                "probe_core/sampling/posterior.py", "probe_core/defuse/correction.py",
                "probe_core/defuse/labels.py", "probe_core/data/classes.py", "probe_core/team/accounts.py")
# The unit tests and the fast integration tests of permissions and the team. tests/integration/test_trust.py,
# which covers class matching end to end, runs the CLI from other folders, where mutmut's switch cannot follow.
CORE_TESTS = ("tests/unit/", "tests/integration/test_permissions_core.py", "tests/integration/test_team.py")
QUICK_MODULES = ("probe_core/mcmc/hmc.py",)
QUICK_TESTS = ("tests/unit/test_kernels.py", "tests/unit/test_driver.py")
QUICK_MUTANTS = ("probe_core.mcmc.hmc.x__kinetic__mutmut_*",)  # one function's mutants: the pipeline, quickly
# mutmut stops a mutant's tests after 15 times their clean duration plus this many CPU seconds: the clean
# durations are measured with the modules already imported, and a test's first torch call in a fresh fork costs
# more than that, which mutmut would count as a timeout (a kill) whatever the mutant.
TIMEOUT_SECONDS = 20
# Tests that start a process with an environment of their own: mutmut's switch (an environment variable) does
# not reach it, so the mutated code there fails whatever the mutant. They are left out of the mutation run.
ALSO_COPIED = ("app.py", "pages/", "assets/", ".streamlit/", "examples/", "requirements.txt", "requirements-ray.txt",
               "requirements-dev.txt", "README.md", "CONTRIBUTING.md", "docs/", "benchmarks/", "Makefile", ".ci/")
SPINNER = tuple("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")  # mutmut's progress lines, left out of a failure's output
DESELECTED = ("tests/unit/test_user_data.py::test_a_reference_resolves_in_another_process_and_folder_and_a_view_keeps_"
              "its_classes",)


def copy_tracked(copy: Path, under: str = "") -> None:
    """The working tree's version of every tracked file (below ``under``) into ``copy``, with :data:`DESELECTED`
    tests removed from their modules (pytest's --deselect acts after mutmut looks)."""
    tracked = subprocess.run(["git", "ls-files", *([under] if under else [])], cwd=ROOT, capture_output=True,
                             text=True, check=True)
    for name in tracked.stdout.splitlines():
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    for test in DESELECTED:
        path, name = test.split("::")
        if (copy / path).is_file() and (not under or path.startswith(under)):
            with open(copy / path, "a") as module:
                module.write(f"\n\ndel {name}  # left out of the mutation run (benchmarks/mutation.py)\n")


def write_config(copy: Path, modules: tuple[str, ...], tests: tuple[str, ...]) -> None:
    """mutmut's settings in the copy's setup.cfg: the whole package is copied (the tests import all of it),
    only ``modules`` are mutated, ``tests`` are the tests it runs."""
    lines = ["[mutmut]", "source_paths=probe_core/", "only_mutate=", *(f"    {module}" for module in modules),
             "pytest_add_cli_args_test_selection=", *(f"    {path}" for path in tests),
             # what the tests read beside the package (the dashboard's pages, its assets and settings)
             "also_copy=", *(f"    {path}" for path in ALSO_COPIED),
             "use_git_change_detection=False", f"timeout_constant={TIMEOUT_SECONDS}",
             # each mutant's process is forked from a server that has only collected the tests: a fork of a
             # process whose torch threads have run hangs in the child's first parallel operation
             "process_isolation=forkserver"]
    (copy / "setup.cfg").write_text("\n".join(lines) + "\n")


def scores(copy: Path, modules: tuple[str, ...]) -> tuple[dict[str, Counter], list[str]]:
    """Per module, how many mutants ended in each status, and the surviving mutants' names (from mutmut's
    ``.meta`` files, read with mutmut's own meaning of each exit code)."""
    from mutmut.stats import status_by_exit_code

    counts, survivors = {}, []
    for module in modules:
        meta = copy / "mutants" / f"{module}.meta"
        exit_codes = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
        counts[module] = Counter(status_by_exit_code[code] for code in exit_codes.values())
        survivors += sorted(key for key, code in exit_codes.items() if code == 0)
    return counts, survivors


def retest_names(copy: Path, modules: tuple[str, ...]) -> list[str]:
    """The mutants of ``modules`` that survived in the kept copy or that no test reached."""
    from mutmut.stats import status_by_exit_code

    names = []
    for module in modules:
        meta = copy / "mutants" / f"{module}.meta"
        exit_codes = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
        names += sorted(key for key, code in exit_codes.items()
                        if status_by_exit_code.get(code) in ("survived", "no tests"))
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the HMC kernel alone (CI's smoke run)")
    parser.add_argument("--modules", help="comma-separated module paths (default: the core modules)")
    parser.add_argument("--keep", help="make the copy here and keep it (default: a temporary folder, removed)")
    parser.add_argument("--show-survivors", action="store_true", help="list the surviving mutants' names")
    parser.add_argument("--retest-survivors", action="store_true",
                        help="with --keep DIR of an earlier run: test again, with the working tree's tests, only the "
                             "mutants that survived there or that no test reached")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    modules = tuple(args.modules.split(",")) if args.modules else QUICK_MODULES if args.quick else CORE_MODULES
    tests = QUICK_TESTS if args.quick else CORE_TESTS
    missing = [module for module in modules if not (ROOT / module).is_file()]
    if missing:
        sys.exit(f"no such module: {', '.join(missing)}")
    if args.retest_survivors and not (args.keep and (Path(args.keep) / "mutants").is_dir()):
        sys.exit("--retest-survivors needs --keep DIR, the copy an earlier run kept")
    copy = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="mutation-"))
    try:
        chosen = list(QUICK_MUTANTS) if args.quick else []
        if args.retest_survivors:
            # the tests as they are now, where mutmut runs them (mutants/) and where it reads them from
            copy_tracked(copy, "tests/")
            copy_tracked(copy / "mutants", "tests/")
            chosen = retest_names(copy, modules)
            print(f"retesting the {len(chosen)} mutants that survived or that no test reached, with the tests of "
                  f"the working tree", flush=True)
        else:
            copy_tracked(copy)
        shared = ROOT.parent / "shared"
        if shared.is_dir() and not (copy / "shared").exists():  # the tests find ../shared beside their checkout
            (copy / "shared").symlink_to(shared)
        write_config(copy, modules, tests)
        # the mutated package, not the install; the folder exists before Python starts, or its import system
        # would remember it as missing
        (copy / "mutants").mkdir(exist_ok=True)
        environment = {**os.environ, "PYTHONPATH": str(copy / "mutants")}
        started = time.perf_counter()
        # the console script, not `python -m mutmut`: mutmut's module must be imported once, under its own name
        mutmut = Path(sys.executable).with_name("mutmut")
        with open(copy / "mutmut.log", "a" if args.retest_survivors else "w") as log:
            completed = subprocess.run([str(mutmut), "run", "--max-children", str(args.max_children), *chosen],
                                       cwd=copy, env=environment, stdout=log, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - started
        counts, survivors = scores(copy, modules)
        if completed.returncode != 0 and not any(sum(c[s] for s in ("killed", "survived")) for c in counts.values()):
            lines = (copy / "mutmut.log").read_text(errors="replace").replace("\r", "\n").splitlines()
            output = "\n".join(line for line in lines if line.strip() and not line.lstrip().startswith(SPINNER))
            sys.exit(f"mutmut failed (exit {completed.returncode}):\n{output[-3000:]}")
        print(f"mutation score of {len(modules)} module(s), tests {', '.join(tests)} ({seconds:.0f} s, "
              f"mutmut {args.max_children} processes)\n")
        print("| module | mutants | killed | survived | timeout | no tests | not run | score |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        total = Counter()
        for module, count in counts.items():
            tested = count["killed"] + count["survived"]
            total.update(count)
            mutants = sum(count.values())
            score = f"{count['killed'] / tested:.0%}" if tested else "-"
            print(f"| `{module}` | {mutants} | {count['killed']} | {count['survived']} | {count['timeout']} | "
                  f"{count['no tests']} | {count['not checked']} | {score} |")
        tested = total["killed"] + total["survived"]
        print(f"| all | {sum(total.values())} | {total['killed']} | {total['survived']} | {total['timeout']} | "
              f"{total['no tests']} | {total['not checked']} | {total['killed'] / tested:.0%} |" if tested
              else "| all | 0 | | | | | | - |")
        if args.show_survivors:
            print("\n".join(f"survived: {name}" for name in survivors))
    finally:
        if not args.keep:
            shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    main()
