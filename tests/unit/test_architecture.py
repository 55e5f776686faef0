"""The shape of the code: one-way imports, no streamlit in the library, no data set tested by its name."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "probe_core"
# The modules that declare catalogue entries may name data sets; nothing else may branch on a name.
DECLARATIONS = {"probe_core.data.datasets", "probe_core.scenes.catalog", "probe_core.catalog"}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(name: str, path: Path) -> set[str]:
    """Every module imported anywhere in the file, inside functions too (absolute names)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            base = node.module
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join([*parts, node.module])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        for target in _imports(name, path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # importing probe_core.a.b runs probe_core.a's __init__ first: an edge to each enclosing package too
            # (but the root, whose API is imported lazily on first use)
            while target and target != "probe_core":
                if target != name and not name.startswith(target + "."):
                    edges.add(target)
                target = target.rpartition(".")[0]
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        state[module] = 2
        stack.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_probe_core_has_no_import_cycle_counting_imports_inside_functions():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_probe_core_never_imports_streamlit():
    offenders = sorted(name for name, path in _modules().items()
                       if any(i == "streamlit" or i.startswith("streamlit.") for i in _imports(name, path)))
    assert not offenders, f"streamlit imported by {offenders}"


def _dataset_names() -> set[str]:
    from probe_core.catalog import DATASETS

    return set(DATASETS) | {"scene"}


def _name_tests(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines that compare a value with a data set name or test a name prefix (``x.startswith("scenes")``)."""
    def names_a_dataset(node) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
            any(node.value == n or node.value.startswith(n + ":") or node.value == n + "-" for n in names)

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(names_a_dataset(c) for c in [node.left, *node.comparators]):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith", "removeprefix") and \
                any(isinstance(a, ast.Constant) and isinstance(a.value, str) and
                    any(a.value.startswith(n) for n in names) for a in node.args):
            lines.append(node.lineno)
    return lines


def test_no_module_tests_a_data_set_or_model_by_its_name():
    names = _dataset_names()
    offenders = []
    for name, path in _modules().items():
        if name not in DECLARATIONS:
            offenders += [f"{path.relative_to(ROOT)}:{line}" for line in _name_tests(ast.parse(path.read_text()), names)]
    for path in [ROOT / "app.py", *sorted((ROOT / "pages").rglob("*.py"))]:
        offenders += [f"{path.relative_to(ROOT)}:{line}" for line in _name_tests(ast.parse(path.read_text()), names)]
    assert not offenders, f"name tests instead of catalogue capabilities at {offenders}"


def test_the_name_test_finder_finds_planted_ones():
    tree = ast.parse('if x.startswith("scenes"):\n    pass\nif name == "digits":\n    pass\ny = "digits"\n')
    assert _name_tests(tree, {"digits", "scenes"}) == [1, 3]


def test_no_form_starts_work_on_enter():
    """Enter in a field never submits a form (one click, one run): every st.form passes enter_to_submit=False."""
    offenders = []
    for path in sorted((ROOT / "pages").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "form":
                keywords = {k.arg: k.value for k in node.keywords}
                value = keywords.get("enter_to_submit")
                if not (isinstance(value, ast.Constant) and value.value is False):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def _store_calls(tree: ast.AST) -> list[int]:
    """Lines calling a method on ``<anything>.store`` (``ws.store.get_samples(...)``)."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "store"]


def test_no_page_reads_or_writes_the_store_itself():
    """Pages go through probe_core's queries (history, bayestrex.queries, defuse.queries, suites), so a change
    of the database touches probe_core alone."""
    offenders = []
    for path in sorted((ROOT / "pages" / "views").glob("*.py")):
        offenders += [f"{path.relative_to(ROOT)}:{line}" for line in _store_calls(ast.parse(path.read_text()))]
    assert not offenders, offenders


# What the pages (views and their UI glue) may import of probe_core: the API (probe_core.api.ui is the door made for
# them), the query modules that read the store for them, and the error, permission and figure types they handle.
PAGE_IMPORTS_ALLOWED = ("probe_core.api", "probe_core.runs.history", "probe_core.bayestrex.queries",
                        "probe_core.defuse.queries", "probe_core.suites", "probe_core.errors", "probe_core.team.accounts",
                        "probe_core.reporting.figures", "probe_core.reporting.render")


def _probe_core_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module or imported name) of every probe_core import, inside functions too."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("probe_core")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("probe_core"):
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _outside_the_api(tree: ast.AST) -> list[tuple[int, str]]:
    return [(line, name) for line, name in _probe_core_imports(tree)
            if not any(name == allowed or name.startswith(allowed + ".") for allowed in PAGE_IMPORTS_ALLOWED)]


def test_pages_speak_only_to_the_api_and_the_query_modules():
    offenders = []
    for path in [ROOT / "app.py", *sorted((ROOT / "pages").rglob("*.py"))]:
        offenders += [f"{path.relative_to(ROOT)}:{line} imports {name}"
                      for line, name in _outside_the_api(ast.parse(path.read_text()))]
    assert not offenders, "pages import probe_core only through probe_core.api.ui and the query modules:\n" + \
        "\n".join(offenders)


def test_the_page_import_finder_finds_planted_ones():
    tree = ast.parse("from probe_core.api.ui import IdentifyRequest\nfrom probe_core.runs import history\n"
                     "from probe_core.defuse import steps\ndef f():\n    import probe_core.cli\n")
    assert _outside_the_api(tree) == [(3, "probe_core.defuse.steps"), (5, "probe_core.cli")]


def test_the_store_call_finder_finds_planted_ones():
    assert _store_calls(ast.parse("ws.store.get_samples(1)\nqueries.samples(ws.store, 1)\n")) == [1]


# Inside a function, only what is heavy or optional at its use may be imported (so the import graph the cycle
# finder reads is the one Python runs); the package's lazy API and the worker, which sets its thread counts
# before torch loads, are the two places that import probe_core late on purpose.
LATE_IMPORTS_ALLOWED = {"torch", "pandas", "sklearn", "scipy", "umap", "ray", "captum", "PIL", "IPython", "tqdm",
                        "pyro", "numpy", "toml", "tomllib", "importlib"}
LATE_PROBE_CORE_IMPORTS_ALLOWED = {"probe_core/__init__.py", "probe_core/runs/worker.py"}


def _late_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom):
                    found.append((node.lineno, node.module or ""))
                elif isinstance(node, ast.Import):
                    found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def _disallowed_late_imports(path: Path, tree: ast.AST) -> list[str]:
    relative = path.relative_to(ROOT).as_posix()
    bad = []
    for line, module in _late_imports(tree):
        root = module.split(".")[0]
        if root == "probe_core" and relative in LATE_PROBE_CORE_IMPORTS_ALLOWED:
            continue
        if root not in LATE_IMPORTS_ALLOWED:
            bad.append(f"{relative}:{line} imports {module} inside a function")
    return bad


def test_probe_core_imports_its_own_modules_at_module_level():
    bad = [problem for path in sorted((ROOT / "probe_core").rglob("*.py"))
           for problem in _disallowed_late_imports(path, ast.parse(path.read_text()))]
    assert not bad, "\n".join(bad)


def test_the_late_import_finder_finds_a_planted_one():
    planted = ast.parse("def f():\n    from probe_core.runs.workspace import Workspace\n    import torch\n")
    assert _disallowed_late_imports(ROOT / "probe_core" / "planted.py", planted) == [
        "probe_core/planted.py:2 imports probe_core.runs.workspace inside a function"]


def test_the_top_level_holds_packages_and_a_handful_of_modules():
    """The folder listing reads as the architecture page does: concerns are packages (runs/, models/, ...); the
    loose modules are what every layer shares: the error types, the progress protocol, the library fixes."""
    assert sorted(path.name for path in PACKAGE.glob("*.py")) == ["__init__.py", "errors.py", "progress.py",
                                                                   "pyfixes.py"]


# The layers of probe_core, lowest first: a module imports only from its own layer and those below (the longest
# prefix decides a module's layer), one package a layer below the runs machinery, so no two packages import each
# other. Generic MCMC sits below everything that knows images. The runs layer never imports a domain above it: a
# stored run's kind is found through the package's entry points (probe_core.runs.lifecycle.kind_named).
# Training, whose models sit below the runs layer, is the one run kind declared in it (runs/training.py).
LAYERS = (
    ("probe_core.errors", "probe_core.progress", "probe_core.pyfixes", "probe_core.store", "probe_core.team"),
    ("probe_core.mcmc",),
    ("probe_core.data",),
    ("probe_core.sampling",),
    ("probe_core.scenes",),
    ("probe_core.catalog",),
    ("probe_core.models",),
    ("probe_core.runs", "probe_core.reporting"),
    ("probe_core.bayestrex", "probe_core.defuse", "probe_core.suites"),
    ("probe_core.api", "probe_core.cli", "probe_core"),
)


def _layer(module: str) -> int:
    matches = [(len(prefix), level) for level, prefixes in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    return max(matches)[1]


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  if _layer(target) > _layer(module))


def test_no_module_imports_from_a_layer_above_its_own():
    upward = _upward_imports(_graph())
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_layer_check_finds_a_planted_upward_import():
    planted = {"probe_core.runs.lifecycle": {"probe_core.defuse.steps"}, "probe_core.defuse.steps": {"probe_core.runs"}}
    assert _upward_imports(planted) == ["probe_core.runs.lifecycle -> probe_core.defuse.steps"]
    assert _layer("probe_core.defuse.steps") > _layer("probe_core.runs.training") > _layer("probe_core.models.registry")
    assert _layer("probe_core.models") > _layer("probe_core.catalog") > _layer("probe_core.scenes") \
        > _layer("probe_core.sampling") > _layer("probe_core.data") > _layer("probe_core.mcmc")


def test_the_generic_mcmc_package_knows_nothing_of_bayes_trex():
    """Kernels, adaptation and the run loop sample any batched log density: they import nothing of the product
    but its error type and the progress protocol, so a new sampler or density is written against them alone."""
    outside = {target for module, targets in _graph().items() if module.startswith("probe_core.mcmc")
               for target in targets if not target.startswith("probe_core.mcmc")}
    assert outside == {"probe_core.errors", "probe_core.progress"}, outside


# What long work took before it took a Reporter (probe_core.progress): a callback of progress values, a stop
# predicate, a hook. No function takes one any more, so a contributor adding a long step finds one way.
OTHER_PROGRESS_PARAMETERS = {"progress_callback", "hook", "should_stop", "on_progress", "shard_progress",
                             "on_epoch", "on_fraction", "stop"}


def _other_progress_protocols(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            found += [(node.lineno, f"{node.name}({a.arg}=...)") for a in arguments
                      if a.arg in OTHER_PROGRESS_PARAMETERS]
        elif isinstance(node, ast.ClassDef) and node.name.endswith("Progress"):
            found.append((node.lineno, f"class {node.name}"))
    return found


def test_long_work_reports_and_stops_through_one_protocol():
    offenders = [f"{path.relative_to(ROOT)}:{line} {what}" for path in sorted(PACKAGE.rglob("*.py"))
                 for line, what in _other_progress_protocols(ast.parse(path.read_text()))]
    assert not offenders, "progress or stop outside probe_core.progress.Reporter:\n" + "\n".join(offenders)


def test_the_protocol_finder_finds_planted_ones():
    tree = ast.parse("def run(x, hook=None):\n    pass\nclass TrainingProgress:\n    pass\n"
                     "def fine(reporter=None):\n    pass\n")
    assert _other_progress_protocols(tree) == [(1, "run(hook=...)"), (3, "class TrainingProgress")]


def test_bayes_trex_does_not_import_defuse():
    """The two methods share their floor (the 2-D embedding in reporting, label sources in the store), not each
    other (issue 101)."""
    crossing = sorted(f"{module} -> {target}" for module, targets in _graph().items()
                      if module.startswith("probe_core.bayestrex") for target in targets
                      if target.startswith("probe_core.defuse"))
    assert not crossing, crossing


def test_each_run_kind_has_its_request_beside_its_domain():
    """A run kind's request is defined in the package of its job (SampleRequest in bayestrex/, the Defuse steps'
    in defuse/), so a domain registers its own request, not one from the floor below (issue 101); the runs layer
    holds only what every request shares, and training's, whose models sit below it."""
    from probe_core.runs.lifecycle import all_run_kinds

    misplaced = {}
    for name, kind in all_run_kinds().items():
        request_package = kind.request_type.__module__.rsplit(".", 1)[0]
        job_package = kind.job.__module__.rsplit(".", 1)[0]
        if request_package != job_package:
            misplaced[name] = (kind.request_type.__module__, kind.job.__module__)
    assert not misplaced, misplaced
    assert all_run_kinds()["sample"].request_type.__module__ == "probe_core.bayestrex.request"


REGISTRY_NAMES = {"ModelRegistry", "TrainingAnnouncer"}
REGISTRY_MAX_LINES = 400


def _registry_constant_imports(tree: ast.AST) -> list[str]:
    return [alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "probe_core.models.registry"
            for alias in node.names if alias.name not in REGISTRY_NAMES]


def test_the_registry_is_one_job_and_nothing_imports_it_for_a_constant():
    """models/registry.py stores, loads, trains on request and remembers; specs, recipes, loaded models, access and
    references live beside it (issue 101), so a module that wants a kind or a range does not import the registry
    (and every trainer behind it)."""
    registry = PACKAGE / "models" / "registry.py"
    assert len(registry.read_text().splitlines()) <= REGISTRY_MAX_LINES
    found = {str(path.relative_to(ROOT)): names for path in PACKAGE.rglob("*.py")
             if (names := _registry_constant_imports(ast.parse(path.read_text())))}
    assert not found, found


def test_the_registry_import_finder_finds_a_planted_one():
    planted = ast.parse("from probe_core.models.registry import ModelRegistry, SEED_RANGE\n")
    assert _registry_constant_imports(planted) == ["SEED_RANGE"]


FUNCTION_MAX_LINES = 80


def _long_functions(tree: ast.AST, limit: int = FUNCTION_MAX_LINES) -> list[str]:
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


def test_no_function_in_probe_core_is_over_eighty_lines():
    """Long steps are split into named ones (issue 101): a reader sees the run as its steps."""
    found = {str(path.relative_to(ROOT)): long for path in PACKAGE.rglob("*.py")
             if (long := _long_functions(ast.parse(path.read_text())))}
    assert not found, found


def test_the_long_function_finder_finds_a_planted_one():
    planted = ast.parse("def long():\n" + "    x = 1\n" * 85)
    assert _long_functions(planted) == ["long (86 lines)"]


def _json_round_trips(tree: ast.AST) -> list[str]:
    """Functions that both write and read JSON (``json.dumps`` and ``json.loads``): a value made text and read
    back inside one process."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls = {f"{call.func.value.id}.{call.func.attr}" for call in ast.walk(node)
                     if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                     and isinstance(call.func.value, ast.Name)}
            if {"json.dumps", "json.loads"} <= calls:
                found.append(node.name)
    return found


# The store writes a row's JSON and reads it back where it updates one field of it: JSON at the store is its job.
JSON_AT_THE_STORE = "probe_core/store/"


def test_no_request_goes_through_json_inside_one_process():
    """A request travels as the object inside one process (issue 101): JSON only where it is stored and between
    processes; run_now and a thread launcher hand the job the request itself."""
    found = {str(path.relative_to(ROOT)): trips for path in PACKAGE.rglob("*.py")
             if not str(path.relative_to(ROOT)).startswith(JSON_AT_THE_STORE)
             and (trips := _json_round_trips(ast.parse(path.read_text())))}
    assert not found, found
    from probe_core.bayestrex.request import SampleRequest
    from probe_core.runs.lifecycle import job_spec

    request = SampleRequest(dataset="digits", target="high:3", class_names=tuple("0123456789"))
    assert job_spec(request).made is request  # the job built in this process runs this very object


def test_the_json_round_trip_finder_finds_a_planted_one():
    planted = ast.parse("import json\ndef normalise(config):\n    return json.loads(json.dumps(config))\n")
    assert _json_round_trips(planted) == ["normalise"]
