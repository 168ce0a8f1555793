"""The layers of walfs, as a rule on folders: each folder imports only the folders below it
(LAYERS, written once here). The engines sit on the contract (walfs/engine/), the faces on the
contract and never on an engine (walfs/open.py is the one module that knows both engines),
so that an engine plugs in without touching a face, and a face without touching an engine.

An ast scan of every module's imports, at any depth (late imports inside functions and
imports under TYPE_CHECKING count too), and of `import walfs; walfs.X` attribute uses: a
module may import the standard library, third-party packages, its own folder, and the
folders its row lists."""

import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent
WALFS = REPO / "walfs"

ENGINE_BASE = ("walfs.engine", "walfs.common", "walfs.errors")
FACE_BASE = ("walfs.engine", "walfs.wire", "walfs.common", "walfs.errors", "walfs.open")
# Each layer (a folder, or a module standing for one) and the layers it may import. The
# facade is walfs/__init__.py, walfs/wal.py and walfs/consumer.py (LAYER_OF).
LAYERS: dict[str, tuple[str, ...]] = {
    "walfs.errors": (),
    "walfs._core": (),  # the compiled C library (cffi)
    "walfs._build": (),  # its cffi build script
    "walfs.common": ("walfs.errors",),
    "walfs.engine": ("walfs.common", "walfs.errors"),
    "walfs.wire": (*ENGINE_BASE, "walfs._core"),
    "walfs.local": (*ENGINE_BASE, "walfs.wire", "walfs._core"),
    "walfs.cluster": (*ENGINE_BASE, "walfs.wire"),
    "walfs.open": ("walfs.local", "walfs.cluster", *ENGINE_BASE),
    "facade": ("walfs.open", *ENGINE_BASE),
    # The faces; another face only where listed.
    "walfs.fuse": FACE_BASE,
    "walfs.kafka": FACE_BASE,
    "walfs.spark": (*FACE_BASE, "walfs.kafka"),  # the Kafka codecs for `bootstrap` reads and writes
    "pyspark_walfs": (*FACE_BASE, "walfs.spark"),  # the Spark data source's registration
    # The daemon composes the faces.
    "walfs.service": (*FACE_BASE, "walfs.fuse", "walfs.kafka"),
    # The command line: anything but an engine's internals (engines through walfs.open).
    "walfs.cli": (*FACE_BASE, "facade", "walfs.service", "walfs.fuse", "walfs.kafka", "walfs.spark"),
    "walfs.__main__": ("walfs.cli",),
}
LAYER_OF = {"walfs": "facade", "walfs.wal": "facade", "walfs.consumer": "facade"}
# Imports allowed against the rule while a change is under way (none today). Each must still
# occur (else delete it here).
LEAVING: set[tuple[str, str]] = set()


def layer(module: str) -> str | None:
    """The layer of a module of walfs (None: the stdlib or a third-party package)."""
    if module in LAYER_OF:
        return LAYER_OF[module]
    for name in sorted(LAYERS, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return name
    if module.startswith("walfs.") or module.startswith("pyspark_walfs"):
        return module  # a new top-level module: not in LAYERS, so nothing may import it
    return None


def module_of(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: pathlib.Path, root: pathlib.Path) -> list[tuple[int, str, str]]:
    """(line, what the source says, the module it reaches) for every import of walfs."""
    import walfs.errors

    errors = {n for n in dir(walfs.errors) if n.endswith("Error")} | {"errors"}
    me = module_of(path, root)
    is_package = path.name == "__init__.py"

    def package_name(name: str) -> str:
        """What `from walfs import name` or `walfs.name` reaches."""
        if name in errors:
            return "walfs.errors"
        if name == "__version__":
            return "walfs.errors"  # a constant: reaches nothing
        sub = WALFS / name
        if sub.is_dir() or sub.with_suffix(".py").exists() or name == "_core":
            return f"walfs.{name}"
        return "walfs"  # the facade's own names (Wal, Consumer, ...)

    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, f"import {a.name}", a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = me.split(".") if is_package else me.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for a in node.names:
                target = package_name(a.name) if mod == "walfs" else mod
                said = f"from {mod} import {a.name}" if mod == "walfs" else f"from {mod} import ..."
                out.append((node.lineno, said, target))
        elif isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "walfs":
            out.append((node.lineno, f"walfs.{node.attr}", package_name(node.attr)))
    return out


def violations(path: pathlib.Path, root: pathlib.Path = REPO) -> list[str]:
    mine = layer(module_of(path, root))
    out = []
    for line, said, target in imports(path, root):
        theirs = layer(target)
        if theirs is None or theirs == mine or target == "walfs" and said.startswith("import walfs"):
            continue  # `import walfs` alone: its uses (walfs.X) are checked one by one
        if mine is None or theirs not in LAYERS.get(mine, ()):
            if (mine, theirs) not in LEAVING:
                out.append(f"{path.relative_to(root)}:{line}: {said}  ({mine} may not import {theirs})")
    return out


def sources() -> list[pathlib.Path]:
    return sorted([*WALFS.rglob("*.py"), *(REPO / "pyspark_walfs").rglob("*.py")])


def test_every_module_has_a_layer_and_every_layer_a_module() -> None:
    found = {layer(module_of(p, REPO)) for p in sources()}
    assert None not in found
    assert found - set(LAYERS) == set(), "a module outside every layer: add its row to LAYERS"
    assert set(LAYERS) - found <= {"walfs._core", "walfs.open"}, set(LAYERS) - found


def test_each_folder_imports_only_the_folders_below_it() -> None:
    found = [v for p in sources() for v in violations(p)]
    assert found == [], "imports across the layers (LAYERS in this test):\n" + "\n".join(found)


def test_the_leaving_exceptions_are_still_needed() -> None:
    seen = set()
    for p in sources():
        mine = layer(module_of(p, REPO))
        seen |= {(mine, layer(t)) for _, _, t in imports(p, REPO)}
    assert LEAVING <= seen, f"delete from LEAVING: {sorted(LEAVING - seen)}"


def test_the_scan_catches_what_it_must(tmp_path: pathlib.Path) -> None:
    """The scanner itself: each way of reaching an engine's internals from a face is
    caught; the allowed ones pass."""
    face = tmp_path / "walfs" / "fuse"
    face.mkdir(parents=True)
    bad = face / "face.py"
    bad.write_text(
        "import walfs\nfrom walfs.wal import Wal\nfrom walfs import Wal as W\nimport walfs.local.core\n"
        "def late():\n    from walfs.local.engine import LocalEngine\n    return walfs.Wal\n"
        "from walfs.local.cursors import CursorStore\nfrom walfs._core import lib\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from walfs.cluster.engine import KafkaEngine\n"
        "from walfs.kafka.api import Api\n"
    )
    good = face / "good.py"
    good.write_text(
        "import os, trio\nimport walfs\nfrom walfs.engine.contract import LogEngine\n"
        "from walfs import WalError, errors\nfrom walfs.engine.names import topic_bytes\n"
        "from walfs.fuse.nodes import Node\nfrom . import sibling\nfrom walfs.common.sizes import human\n"
        "def late():\n    from walfs.open import open_engine\n    return walfs.WalError, walfs.errors\n"
    )
    bad_rel = sorted(v.split(": ", 1)[1].split("  (")[0] for v in violations(bad, tmp_path))
    assert bad_rel == sorted(
        [
            "from walfs.wal import ...",
            "from walfs import Wal",
            "import walfs.local.core",
            "from walfs.local.cursors import ...",
            "from walfs._core import ...",
            "from walfs.local.engine import ...",
            "from walfs.cluster.engine import ...",
            "from walfs.kafka.api import ...",
            "walfs.Wal",
        ]
    )
    assert violations(good, tmp_path) == []
    common = tmp_path / "walfs" / "common"
    common.mkdir()
    (common / "x.py").write_text("from walfs.kafka.listener import x\nfrom walfs.errors import WalError\n")
    assert [v.split(": ", 1)[1] for v in violations(common / "x.py", tmp_path)] == [
        "from walfs.kafka.listener import ...  (walfs.common may not import walfs.kafka)"
    ]
