"""One owner for what the entry points share (issue 39 item 3): the refusals, the failures, the
logging, backend=auto and the started process live in parallel_wan/entry/, which run.py, the
server, the doctor, the planner and quantize use — nothing imports run.py's insides; one check of
a generation's settings that prompt-file jobs and server requests both call; the server runs its
requests through jobs/one_entry.py, never the batch runner. And the processes tests and benchmarks
both start (rank pools, servers) live in processes/, which imports neither."""

import ast
from pathlib import Path

from harness.paths import PACKAGE, REPO

PACKAGE = Path(PACKAGE)
ENTRY_POINTS = (
    "run.py",
    "cli.py",
    "serve/__main__.py",
    "serve/server.py",
    "doctor.py",
    "memory_plan/cli.py",
    "quantize.py",
)


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in `path`, anywhere in it, relative ones made absolute."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = parts if path.name == "__init__.py" else parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
    return found


def calls(path: Path) -> set[str]:
    return {
        node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
    }


def test_nothing_imports_run_py_nor_an_entry_points_private_names():
    """The server used run.py's `_refuse`, `_fail`, `_log_choices` and `setup_logging`."""
    entry_modules = {"parallel_wan." + n.removesuffix(".py").replace("/", ".") for n in ENTRY_POINTS}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for module, names in imports(path):
            private = module in entry_modules | {"parallel_wan.entry"} and any(n.startswith("_") for n in names)
            if module == "parallel_wan.run" or private:
                found.append(f"{path.relative_to(PACKAGE)}: from {module} import {', '.join(names)}")
    assert not found, found


def test_every_entry_point_refuses_through_the_entry_module():
    """One line and exit 2 is said in one place (entry/endings.py): no entry point prints its own
    `error: {exc}`, and each imports the entry module."""
    for name in ENTRY_POINTS:
        path = PACKAGE / name
        assert "error: {exc}" not in path.read_text(), name
        assert any(module.startswith("parallel_wan.entry") for module, _ in imports(path)), name


def test_run_and_the_server_start_through_one_started_process():
    for name in ("run.py", "serve/server.py"):
        path = PACKAGE / name
        assert "started_process" in calls(path), name
        # the steps the started process owns are not done again here
        assert not calls(path) & {"join_job", "setup_logging", "make_backend", "log_choices"}, name


def test_prompt_file_entries_and_server_requests_pass_one_check():
    """run.validate_job (every entry of a job) and RequestResolver.spec (every request) call check_entry;
    the checkpoint's compatibility is checked nowhere else (but inside preflight, the first look)."""
    assert "check_entry" in calls(PACKAGE / "run.py")
    served = ast.parse((PACKAGE / "serve" / "served.py").read_text())
    spec = next(n for n in ast.walk(served) if isinstance(n, ast.FunctionDef) and n.name == "spec")
    assert any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "check_entry" for n in ast.walk(spec))
    callers = sorted(
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if "check_compatible" in calls(path)
    )
    assert callers == ["entry/entry_check.py", "pipeline/checkpoint.py"], callers


def test_the_server_runs_requests_through_one_entry_not_the_batch_runner():
    for path in sorted((PACKAGE / "serve").glob("*.py")):
        for module, _ in imports(path):
            assert module not in ("parallel_wan.jobs", "parallel_wan.jobs.runner"), (path.name, module)
    worker = {module for module, _ in imports(PACKAGE / "serve" / "worker.py")}
    assert "parallel_wan.jobs.one_entry" in worker


def test_the_swap_reload_between_videos_is_one_function_both_callers_use():
    for name in ("jobs/runner.py", "serve/worker.py"):
        assert "reload_experts" in calls(PACKAGE / name), name
    for module, names in imports(PACKAGE / "serve" / "worker.py"):  # the server's one load is server.py's
        assert not (module == "parallel_wan.pipeline.checkpoint" and "load" in names), names


def test_tests_and_benchmarks_share_processes_that_import_neither():
    """The rank pool and the server processes live in processes/ (at the checkout's top: the
    benchmarks run without tests/ on the import path); the harness takes nothing from benchmarks/
    and processes/ nothing from tests or benchmarks."""
    repo = Path(REPO)
    harness = sorted((repo / "tests" / "harness").rglob("*.py")) + [repo / "tests" / "conftest.py"]
    for path in harness:
        for module, _ in imports(path):
            assert module.split(".")[0] != "benchmarks", (path.name, module)
    for path in sorted((repo / "processes").glob("*.py")):
        tree = ast.parse(path.read_text())
        roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not roots & {"benchmarks", "harness", "tests"}, (path.name, roots)
    from harness.ranks import POOL
    from harness.serve import Server

    from processes.gloo_ranks import RankPool
    from processes.servers import ServerProcesses

    assert isinstance(POOL, RankPool) and issubclass(Server, ServerProcesses)
