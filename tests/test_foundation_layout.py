"""The package layout's rules, read from the code: imports point one way
(pipeline -> engines -> kernels / parley), only pipeline imports livekit, no cycles."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("parley", "pipeline", "stt", "tts", "turn_detection", "llm_engine", "kernels")
ENGINES = ("stt", "tts", "turn_detection", "llm_engine", "kernels")


def imports_of(package: str) -> dict[str, set[str]]:
    """{module path: top-level names it imports}, including imports inside functions."""
    out = {}
    for path in (ROOT / package).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = names
    return out


def package_graph() -> dict[str, set[str]]:
    return {p: {n for names in imports_of(p).values() for n in names if n in PACKAGES and n != p}
            for p in PACKAGES}


def test_shared_primitives_import_no_stage():
    assert package_graph()["parley"] == set()


def test_engines_never_import_pipeline_or_livekit():
    for pkg in ENGINES:
        for module, names in imports_of(pkg).items():
            assert "pipeline" not in names, module
            assert "livekit" not in names, module


def test_kernels_depend_on_nothing_but_parley():
    assert package_graph()["kernels"] <= {"parley"}


def test_no_cycles_between_top_level_packages():
    graph = package_graph()
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*stack, node, nxt]))
            if nxt not in state:
                visit(nxt, [*stack, node])
        state[node] = 2

    for p in PACKAGES:
        if p not in state:
            visit(p, [])


# Inside pipeline, livekit is the session's business: the plugins, the session and its I/O,
# the worker. Transports (the talk page), the budget, the config and the CLI stay framework-free,
# so a second transport or framework never reaches into them.
LIVEKIT_MODULES = ("pipeline/plugins/", "pipeline/session.py", "pipeline/agent_session.py", "pipeline/audio_io.py",
                   "pipeline/worker.py", "pipeline/components.py", "pipeline/baseline.py")


def test_only_the_session_layer_of_pipeline_imports_livekit():
    offenders = [m for m, names in imports_of("pipeline").items()
                 if "livekit" in names and not m.startswith(LIVEKIT_MODULES)]
    assert not offenders, offenders


def test_transports_reach_the_session_only_through_the_transport_boundary():
    for module, names in imports_of("pipeline").items():
        if module.startswith("pipeline/talk/"):
            assert not names & {"livekit", "llm_engine", "stt", "tts", "turn_detection"}, module
