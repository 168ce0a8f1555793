"""The faces (the mount's modules, the Kafka listener, the Spark source, the CLI) use the
engine interface (walfs/engine/contract.py) and nothing of an engine's internals, so that a
second engine (issue 16's Kafka cluster) plugs in without touching them.

An ast scan of every face module's imports, at any depth (late imports inside functions
count too): a face may import the standard library and third-party packages, the other
modules of the faces, and from walfs only the interface and the shared modules below."""

import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent
WALFS = REPO / "walfs"

# The faces: the mount's modules, the Kafka listener, Spark, the command line.
FACE_FILES = sorted(
    [
        *(WALFS / "fuse").glob("*.py"),
        *(WALFS / "service").glob("*.py"),
        *(WALFS / "kafka").glob("*.py"),
        *(WALFS / "spark").glob("*.py"),
        *(WALFS / "cli").glob("*.py"),
        *(REPO / "pyspark_walfs").glob("*.py"),
    ]
)
FACE_PACKAGES = ("walfs.fuse", "walfs.service", "walfs.kafka", "walfs.spark", "walfs.cli", "pyspark_walfs")
FACE_MODULES: tuple[str, ...] = ()
# What every engine shares: the contract package, errors, the Kafka batch codec, the small
# common utilities (metrics, the daemon's local socket).
SHARED = ("walfs.engine", "walfs.errors", "walfs.wire", "walfs.common", "walfs.open")
# Names a face may take from the package itself (`from walfs import X`): the errors.
PACKAGE_NAMES = {"errors", "engine_api", "names", "records", "Record", "local_socket"}


def _allowed(module: str) -> bool:
    if module == "walfs" or not (module.startswith("walfs.") or module.startswith("pyspark_walfs")):
        return True  # the stdlib, third-party packages; `walfs` itself is checked by name
    return any(module == m or module.startswith(m + ".") for m in (*SHARED, *FACE_PACKAGES, *FACE_MODULES))


def violations(path: pathlib.Path) -> list[str]:
    import walfs.errors

    error_names = {n for n in dir(walfs.errors) if n.endswith("Error")}
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if not _allowed(a.name):
                    out.append(f"{path.relative_to(REPO)}:{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports stay inside the face's package
                continue
            mod = node.module or ""
            if mod == "walfs":
                for a in node.names:
                    if a.name not in PACKAGE_NAMES and a.name not in error_names:
                        out.append(f"{path.relative_to(REPO)}:{node.lineno}: from walfs import {a.name}")
            elif not _allowed(mod):
                out.append(f"{path.relative_to(REPO)}:{node.lineno}: from {mod} import ...")
        elif (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "walfs"
        ):
            # `import walfs` then walfs.Wal(...): the friendly API is not the interface.
            if node.attr not in PACKAGE_NAMES and node.attr not in error_names and node.attr != "__version__":
                out.append(f"{path.relative_to(REPO)}:{node.lineno}: walfs.{node.attr}")
    return out


def test_the_faces_exist_where_this_test_looks() -> None:
    names = {p.relative_to(REPO).as_posix() for p in FACE_FILES}
    for must in (
        "walfs/fuse/operations.py",
        "walfs/service/daemon.py",
        "walfs/kafka/fetch.py",
        "walfs/spark/columnar.py",
        "walfs/cli/fsck.py",
        "walfs/cli/info.py",
    ):
        assert must in names


def test_faces_import_only_the_engine_interface_and_shared_modules() -> None:
    found = [v for p in FACE_FILES for v in violations(p)]
    assert found == [], "faces reach into an engine's internals:\n" + "\n".join(found)


def test_the_scan_catches_what_it_must(tmp_path: pathlib.Path) -> None:
    """The scanner itself: each way of reaching an internal is caught; the allowed ones pass."""
    bad = tmp_path / "face.py"
    bad.write_text(
        "import walfs\nfrom walfs.wal import Wal\nfrom walfs import Wal as W\nimport walfs.local.core\n"
        "def late():\n    from walfs.local.engine import LocalEngine\n    return walfs.Wal\n"
        "from walfs.consumer import CursorStore\nfrom walfs._core import lib\n"
    )
    good = tmp_path / "good.py"
    good.write_text(
        "import os, trio\nfrom walfs.engine.contract import LogEngine\nfrom walfs import WalError, errors\n"
        "from walfs.engine.names import topic_bytes\nfrom walfs.kafka.api import Api\nfrom . import sibling\n"
    )
    bad_rel = sorted(v.split(": ", 1)[1] for v in _scan_outside(bad))
    assert bad_rel == sorted(
        [
            "from walfs.wal import ...",
            "from walfs import Wal",
            "import walfs.local.core",
            "from walfs.consumer import ...",
            "from walfs._core import ...",
            "from walfs.local.engine import ...",
            "walfs.Wal",
        ]
    )
    assert _scan_outside(good) == []


def _scan_outside(path: pathlib.Path) -> list[str]:
    """violations() for a file outside the repository (relative names from its directory)."""
    global REPO
    saved = REPO
    REPO = path.parent
    try:
        return violations(path)
    finally:
        REPO = saved
