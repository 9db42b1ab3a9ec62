"""The house's rules, read from the code with ``ast``: commands on top, a library below grouped by job.

Imports are resolved through the subpackages' public faces (``from search.storage import mask_url`` is
an import of ``search.storage``, whose ``__init__`` imports its light modules, and of
``search.storage._urls``, where the name is defined, even when the face loads it lazily), at any depth
of a module (an import inside a function counts), so a rule holds for what a module can ever import,
not only for what it imports first. An import under ``if TYPE_CHECKING:`` is never made at run time
and does not count (a face's lazy names are followed by name, as above).
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

COMMANDS = {
    "search.optimize",
    "search.confirm",
    "search.report",
    "search.transfer",
    "search.dashboard",
    "search.diagnose",
}
READ_ONLY_COMMANDS = {"search.report", "search.transfer", "search.dashboard"}
SUBPACKAGES = {
    "cli",
    "core",
    "scalers",
    "tasks",
    "training",
    "storage",
    "study",
    "confirmation",
    "results",
    "publishing",
    "diagnosis",
}
MAX_LINES = 400


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(folder: str) -> list[pathlib.Path]:
    return sorted((ROOT / folder).rglob("*.py"))


MODULES = {_module_name(p): p for p in _sources("search")}


HEAVY = ("torch", "optuna", "plotly", "sklearn", "sqlalchemy")  # seconds (torch 2, optuna 1) or tenths of one


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _face(package: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """A package's ``__init__`` read: (its eager imports, its lazy ones under ``if TYPE_CHECKING:``,
    ``__all__``); each import as name -> the module it is imported from."""
    path = MODULES.get(package)
    if path is None or path.name != "__init__.py":
        return {}, {}, []
    tree = ast.parse(path.read_text())

    def names(statements: list[ast.stmt]) -> dict[str, str]:
        return {
            alias.asname or alias.name: node.module
            for node in statements
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }

    lazy = names([n for block in tree.body if _is_type_checking(block) for n in block.body])
    listed = next(
        (
            ast.literal_eval(n.value)
            for n in tree.body
            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets)
        ),
        [],
    )
    return names(tree.body), lazy, listed


@functools.cache
def _exports(package: str) -> dict[str, str]:
    """A package's public face (``__all__``, imported eagerly or under ``if TYPE_CHECKING:`` and loaded on
    first use): name -> the module it is imported from."""
    eager, lazy, listed = _face(package)
    found = eager | lazy
    return {name: found[name] for name in listed if name in found}


def _home(package: str, name: str) -> str:
    """The module that defines a public name of ``package``, through the faces that re-export it."""
    module = _exports(package)[name]
    while MODULES[module].name == "__init__.py":
        module = _exports(module)[name]
    return module


def _resolve(module: str, name: str | None = None) -> set[str]:
    """The modules an import of ``module`` (``from module import name``) really loads: the module, and the
    module that defines the name (through the faces that re-export it)."""
    found = {module}
    if name is not None:
        if f"{module}.{name}" in MODULES:
            found.add(f"{module}.{name}")
        while name in _exports(module):
            module = _exports(module)[name]
            found.add(module)
            if MODULES[module].name != "__init__.py":
                break
    return found


def _import_nodes(tree: ast.AST, at_import: bool) -> list[ast.stmt | ast.expr]:
    """The import statements (and ``import_module`` calls) of a module, never those under ``if
    TYPE_CHECKING:``; with ``at_import``, only those run when the module is imported (none inside a function).
    """
    found: list[ast.stmt | ast.expr] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                todo += [ast.Module(body=child.orelse, type_ignores=[])]
            elif at_import and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                todo += getattr(child, "decorator_list", []) + [
                    a for a in child.args.defaults + child.args.kw_defaults if a
                ]
            else:
                if isinstance(child, (ast.Import, ast.ImportFrom, ast.Call)):
                    found.append(child)
                todo.append(child)
    return found


@functools.cache
def imports(module: str, at_import: bool = False) -> frozenset[str]:
    """Every module ``module`` imports directly, at any depth of its code (``at_import``: when it is
    imported)."""
    found: set[str] = set()
    for node in _import_nodes(ast.parse(MODULES[module].read_text()), at_import):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _resolve(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                found |= _resolve(node.module, alias.name)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
        ):
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return frozenset(found)


def reach(module: str, at_import: bool = False) -> dict[str, str]:
    """Every module ``module`` can import, directly or through the package's modules: name -> via whom
    (``at_import``: every module that importing it imports).

    A module that a face imports only to hold its names is loaded, but its functions run only for a module
    that imports one of those names, which reaches it directly: through a face, only what a module imports
    when it is imported is followed.
    """
    via: dict[str, str] = {}
    todo = [(module, at_import)]
    done: set[tuple[str, bool]] = set()
    while todo:
        current, loaded = todo.pop()
        if (current, loaded) in done or (current, False) in done:
            continue
        done.add((current, loaded))
        for imported in imports(current, loaded):
            via.setdefault(imported, current)
            if imported in MODULES and imported != "search":
                todo.append((imported, loaded or MODULES[current].name == "__init__.py"))
    return via


def _path_to(module: str, target: str, via: dict[str, str]) -> str:
    chain = [target]
    while chain[-1] != module and chain[-1] in via:
        chain.append(via[chain[-1]])
    return " <- ".join(chain)


def _command_of(module: str) -> str | None:
    return next((c for c in COMMANDS if module == c or module.startswith(c + ".")), None)


def _in(module: str, subpackage: str) -> bool:
    return module == f"search.{subpackage}" or module.startswith(f"search.{subpackage}.")


def test_search_holds_the_commands_and_the_subpackages():
    names = {p.name for p in (ROOT / "search").iterdir() if not p.name.startswith((".", "__pycache__"))}
    commands = {f"{c.split('.')[1]}.py" for c in COMMANDS}
    assert names == commands | SUBPACKAGES | {"__init__.py", "_lazy.py"}, names


def test_the_tests_mirror_the_package():
    """tests/<subpackage>/ for each library subpackage, tests/commands/ for the commands; one basename each,
    since pytest imports test modules by basename (no __init__.py)."""
    folders = {
        p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "__"))
    }
    assert folders <= SUBPACKAGES | {"commands", "tasks_for_tests"}, folders - SUBPACKAGES
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_no_module_is_over_400_lines():
    long = [
        f"{p.relative_to(ROOT)} ({n})"
        for p in _sources("search")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    ]
    assert not long, "split by job: " + ", ".join(long)


def test_every_public_name_is_defined_where_its_package_says():
    for package in [m for m in MODULES if MODULES[m].name == "__init__.py"]:
        for name, module in _exports(package).items():
            if MODULES[module].name == "__init__.py":  # the top package re-exports its subpackages' names
                assert name in _exports(module), f"{package} exports {name}, which {module} does not"
                continue
            tree = ast.parse(MODULES[module].read_text())
            defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            for node in tree.body:
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
                defined |= {t.id for t in targets if isinstance(t, ast.Name)}
            assert name in defined, f"{package} exports {name}, which {module} does not define"


FACES = [m for m in MODULES if MODULES[m].name == "__init__.py"]


@pytest.mark.parametrize("package", FACES)
def test_every_face_imports_its_names(package):
    """A face is imports and ``__all__``, no table of names in strings: a reader, an editor's go-to-definition
    and a type checker follow every name to its module. The lazy ones are imports under ``if TYPE_CHECKING:``,
    which ``search._lazy.lazy_face`` reads back; ``__all__`` lists every public name, eager or lazy."""
    tree = ast.parse(MODULES[package].read_text())
    for node in tree.body[1:]:  # after the docstring
        allowed = (
            isinstance(node, (ast.Import, ast.ImportFrom))
            or (
                _is_type_checking(node)
                and all(isinstance(n, ast.ImportFrom) for n in node.body)
                and not node.orelse
            )
            or (
                isinstance(node, ast.Assign)
                and ast.unparse(node) == "__getattr__, __dir__ = lazy_face(__name__, globals())"
            )
            or (
                isinstance(node, ast.Assign)
                and [getattr(t, "id", "") for t in node.targets] == ["__all__"]
                and isinstance(node.value, ast.List)
            )
            or (
                package == "search" and isinstance(node, ast.Expr) and ast.unparse(node) == "_startup.guard()"
            )
        )
        assert allowed, f"{package}, line {node.lineno}: {ast.unparse(node)[:80]}"
    eager, lazy, listed = _face(package)
    public = {
        n
        for n, module in (eager | lazy).items()
        if not n.startswith("_") and module not in ("typing", "search._lazy")
    }
    assert sorted(listed) == sorted(public), f"{package}: __all__ is not its imported names"
    assert bool(lazy) == (
        "lazy_face" in eager
    ), f"{package}: lazy names need lazy_face, and lazy_face lazy names"


@pytest.mark.parametrize("package", FACES)
def test_a_face_is_lazy_only_where_a_module_is_heavy(package):
    """Importing a face imports nothing heavy (every command starts, prints --help and refuses bad input
    without torch or Optuna), and a name is loaded lazily only where its module would import something heavy.
    """
    via = reach(package, at_import=True)
    heavy = sorted(m for m in via if m.split(".")[0] in HEAVY)
    assert not heavy, f"importing {package} imports {heavy[0]}: {_path_to(package, heavy[0], via)}"
    homes = {_home(package, name) for name in _face(package)[1]}
    needless = sorted(h for h in homes if not any(m.split(".")[0] in HEAVY for m in reach(h, at_import=True)))
    assert (
        not needless
    ), f"{package} loads {', '.join(needless)} lazily, which imports nothing heavy: import it"


START_UP = (
    "torch",
    "optuna",
    "plotly",
    "sklearn",
)  # imported inside a function so that a command starts without


@functools.cache
def _start_up_cost(module: str) -> frozenset[str]:
    """Which of :data:`START_UP` importing ``module`` imports."""
    return frozenset(m.split(".")[0] for m in reach(module, at_import=True)) & frozenset(START_UP)


def _dependencies(module: str) -> set[str]:
    """The modules ``module`` uses (faces resolved to the modules that define the names), at any depth, but
    for an import inside a function that spares the module's importers torch, Optuna, plotly or scikit-learn.
    """
    at_import = imports(module, at_import=True)
    return {
        m
        for m in imports(module)
        if m in MODULES
        and MODULES[m].name != "__init__.py"
        and m != module
        and (m in at_import or not _start_up_cost(m) - _start_up_cost(module))
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    """No two modules import each other, directly or around a loop, counting imports inside functions: an
    import moved into a function to dodge a loop hides it from a reader. (An import inside a function that
    keeps torch, Optuna, plotly or scikit-learn out of a command's start-up is no loop's dodge, and is not
    counted.)"""
    graph = {m: _dependencies(m) for m in MODULES if MODULES[m].name != "__init__.py"}
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(
        "  " + ", ".join(f"{m} -> {' '.join(sorted(graph[m] & set(c)))}" for m in c) for c in cycles
    )


def test_no_import_cycles_between_subpackages():
    """The subpackages are layers (docs/internals.md draws them): none imports another that imports it back,
    counting every import, inside functions too."""
    graph = {p: set() for p in SUBPACKAGES}
    for module in MODULES:
        home = next((p for p in SUBPACKAGES if _in(module, p)), None)
        if home is not None:
            graph[home] |= {p for m in imports(module) for p in SUBPACKAGES if _in(m, p) and p != home}
    assert not _cycles(graph), _cycles(graph)


def test_no_library_module_or_bench_script_imports_a_command():
    offenders = []
    for path in _sources("search") + _sources("bench"):
        name = _module_name(path)
        if (
            _command_of(name) or name == "search"
        ):  # the package's lazy API names transfer_study, not the command
            continue
        own = {m for m in (imports(name) if name in MODULES else _bench_imports(path)) if _command_of(m)}
        if own:
            offenders.append(f"{name} imports {', '.join(sorted(own))}")
    assert not offenders, "library modules must not import commands:\n" + "\n".join(offenders)


def _bench_imports(path: pathlib.Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found |= _resolve(node.module, alias.name)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_no_command_imports_another_command():
    offenders = []
    for command in COMMANDS:
        bad = sorted(m for m in imports(command) if _command_of(m) not in (None, command))
        if bad:
            offenders.append(f"{command} imports {', '.join(bad)}")
    assert not offenders, "\n".join(offenders)


def test_scalers_import_nothing_of_the_service_nor_torch_nor_optuna():
    """The rules are state machines and descriptions: every layer reads them, so they read no layer."""
    for module in [m for m in MODULES if _in(m, "scalers")]:
        via = reach(module)
        bad = sorted(
            m
            for m in via
            if m.split(".")[0] in ("torch", "optuna")
            or (m.startswith("search.") and not _in(m, "scalers") and m != "search._lazy")
        )
        assert not bad, f"{module} imports {bad[0]}: {_path_to(module, bad[0], via)}"


def test_a_log_diagnosis_imports_neither_torch_nor_optuna_nor_a_storage():
    """search.diagnose --log answers in a fraction of a second: no torch (2 s), no Optuna, no storage. (The
    command itself, through the shared skeleton's lazy imports: tests/cli/test_cli.py, in a real interpreter.)
    """
    for top in ("search.diagnosis._log_lines", "search.diagnosis._log_reading"):
        via = reach(top)
        bad = sorted(
            m for m in via if m.split(".")[0] in ("torch", "optuna", "sqlalchemy") or _in(m, "storage")
        )
        assert not bad, f"{top} imports {bad[0]}: {_path_to(top, bad[0], via)}"


def test_a_diagnosis_is_judged_and_narrows_a_search_without_torch():
    """The evidence, the verdict, the printed diagnosis and the narrowing of a search read plain numbers: the
    commands print and start from a diagnosis, and a test builds one by hand, without torch (only the observer
    and the runs train). Neither do they reach Optuna or a storage."""
    for top in (
        "search.diagnosis._evidence",
        "search.diagnosis._training_verdict",
        "search.diagnosis._training",
        "search.diagnosis._narrowing",
    ):
        via = reach(top)
        bad = sorted(
            m for m in via if m.split(".")[0] in ("torch", "optuna", "sqlalchemy") or _in(m, "storage")
        )
        assert not bad, f"{top} imports {bad[0]}: {_path_to(top, bad[0], via)}"


def test_training_imports_neither_optuna_nor_storage():
    offenders = []
    for module in [m for m in MODULES if _in(m, "training")]:
        bad = sorted(
            m for m in imports(module) if m.split(".")[0] == "optuna" or _in(m, "storage") or _in(m, "study")
        )
        if bad:
            offenders.append(f"{module} imports {', '.join(bad)}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize(
    "top", sorted(READ_ONLY_COMMANDS) + ["search.results", "search.publishing", "search.storage"]
)
def test_results_and_the_read_only_commands_never_import_torch(top):
    modules = [m for m in MODULES if m == top or m.startswith(top + ".")]
    offenders = []
    for module in modules:
        via = reach(module)
        bad = sorted(m for m in via if m.split(".")[0] == "torch" or _in(m, "training") or _in(m, "tasks"))
        offenders += [_path_to(module, b, via) for b in bad[:1]]
    assert not offenders, "\n".join(offenders)


def test_library_subpackages_never_import_the_command_skeleton():
    """search.cli is the commands' own: start-up, parsing, exit codes (the package guards start-up)."""
    offenders = []
    for module in MODULES:
        if _command_of(module) or _in(module, "cli") or module == "search":
            continue
        bad = sorted(m for m in imports(module) if _in(m, "cli"))
        if bad:
            offenders.append(f"{module} imports {', '.join(bad)}")
    assert not offenders, "\n".join(offenders)


def test_only_the_record_module_spells_trial_attr_keys():
    """One module owns the trial record: the others read and write attrs through its names."""
    from search.core import _record as record

    keys = {v for k, v in vars(record).items() if k.isupper() and isinstance(v, str)} | set(record.RUN_ATTRS)
    pattern = re.compile(r"""user_attrs(?:\.get\(|\[)\s*["']([a-z_0-9]+)["']""")
    offenders = []
    for path in _sources("search"):
        if path.name == "_record.py":
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(ROOT)} spells {k!r}" for k in pattern.findall(text) if k in keys]
        if '"seed-1"' in text and path.name != "_gradscaler.py":  # the rule names its own baselines
            offenders.append(f"{path.relative_to(ROOT)} spells 'seed-1' (record.DEFAULT_BASELINE)")
    assert not offenders, "\n".join(offenders)


OPTUNA_INTERNALS = "search.storage._optuna_internals"


def _optuna_private_names() -> set[str]:
    """The private attributes of the Optuna objects ``search`` handles: studies, trials, storages."""
    import optuna
    from optuna.distributions import FloatDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage="sqlite://")  # An RDBStorage, wrapped in _CachedStorage.
    trial = study.ask({"x": FloatDistribution(0, 1)})
    frozen = optuna.trial.create_trial(
        params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)}, value=1.0
    )
    cached = study._storage
    objects = [study, trial, frozen, cached, cached._backend, optuna.storages.InMemoryStorage()]
    return {n for obj in objects for n in dir(obj) if n.startswith("_") and not n.startswith("__")}


def test_only_the_internals_module_touches_optuna_private_names():
    """Optuna's private names (modules, attributes, logger names) are used in one module, checked per release.

    ``search.storage._optuna_internals`` says which Optuna it was checked against and why each private
    route is taken; everything else goes through its named functions, so an Optuna upgrade is checked
    in one place.
    """
    private = _optuna_private_names()
    offenders = []
    for name, path in MODULES.items():
        if name == OPTUNA_INTERNALS:
            continue
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [f"{node.module}.{alias.name}" for alias in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[0] == "optuna" and any(part.startswith("_") for part in parts[1:]):
                    offenders.append(f"{where}:{node.lineno} imports {module}")
            if isinstance(node, ast.Attribute) and node.attr in private:
                receiver = node.value
                if not (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")):
                    offenders.append(f"{where}:{node.lineno} reads .{node.attr}")
            if isinstance(node, ast.Name) and node.id == "_CachedStorage":
                offenders.append(f"{where}:{node.lineno} names _CachedStorage")
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"optuna(\.\w+)*\._\w+(\.\w+)*", node.value):
                    offenders.append(f"{where}:{node.lineno} spells {node.value!r}")
    assert not offenders, f"use {OPTUNA_INTERNALS}'s functions:\n" + "\n".join(offenders)


def test_the_optuna_rule_sees_what_it_looks_for():
    """The check above would pass vacuously if it saw no private names: it sees the ones the internals use."""
    assert {
        "_storage",
        "_study_id",
        "_trial_id",
        "_backend",
        "_validate",
        "_pop_waiting_trial_id",
    } <= _optuna_private_names()


def test_the_rules_see_an_import_through_a_public_face():
    """The checks above would pass vacuously if a lazy import were not followed: this one is."""
    assert "search.core._record" in imports("search.results._summary")
    assert "torch" in reach("search.optimize")
    assert _resolve("search", "Runner") == {
        "search",
        "search.study",
        "search.study._trial_loop",
    }  # lazy, twice
    assert "optuna.trial" in reach("search.core._record", at_import=True)
    assert "torch" not in reach("search.core._devices", at_import=True)  # it imports torch inside a function
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "search.study._trial_loop" not in _dependencies(
        "search.study._run_parts"
    )  # torch, inside make_runner


def test_ruff_is_clean():
    """Unused imports and names, undefined names, sorted imports (pyproject's [tool.ruff.lint])."""
    if (
        shutil.which("ruff") is None
        and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode
    ):
        pytest.fail("ruff is not installed; set-up step: pip install -e '.[dev]'")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--output-format",
            "concise",
            "search",
            "bench",
            "tests",
            "examples",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
