"""The shape docs/architecture.md promises: no module over 600 lines, no function over 120,
no import cycle between modules or top-level packages (imports inside functions included),
and the pure scheduling package free of Mininet and os-ken. Measured by the project's own
import parser, scripts/structure_check.py, which is checked here on a small tree too."""
import importlib.util
import textwrap

from conftest import REPO

spec = importlib.util.spec_from_file_location("structure_check", REPO / "scripts" / "structure_check.py")
sc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sc)


def test_the_checkout_holds_its_shape():
    assert sc.check(REPO) == []


def test_scheduling_imports_neither_mininet_nor_os_ken_nor_a_back_end():
    mods = sc.modules(REPO)
    for name, path in mods.items():
        if name.split(".")[0] != "scheduling":
            continue
        text = path.read_text()
        assert "mininet" not in text and "os_ken" not in text, name
        deps = {d.split(".")[0] for d in sc.imports_of(name, path, mods)}
        assert deps <= {"scheduling", "workloads", "runs"}, (name, deps)


def test_the_parser_finds_lazy_cycles_long_functions_and_package_cycles(tmp_path):
    def put(rel, body):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(body))
    put("a/__init__.py", "")
    put("a/x.py", "from .y import f\n")
    put("a/y.py", "def f():\n    from a import x\n" + "    pass\n" * 130)
    put("b/__init__.py", "import a.x\n")
    put("a/z.py", "def g():\n    import b\n")
    problems = sc.check(tmp_path, max_module=600, max_function=120)
    assert "module cycle: a.x <-> a.y" in problems
    assert any(p.startswith("function over 120 lines: a/y.py:f") for p in problems)
    assert "package cycle: a <-> b" in problems
    assert sc.check(tmp_path, max_module=600, max_function=200) != []
