"""The scripts of bench/ (not a package) as modules, for their unit tests."""

import importlib.util
import sys
from types import ModuleType

from tests.conftest import ROOT


def load_bench_module(name: str) -> ModuleType:
    """bench/NAME.py, imported as the module ``bench_NAME`` (a ``/`` in NAME as ``_``).

    A script run from bench/ finds its helper modules beside it (``import harness``), so
    bench/ goes on the path too: last, so that it shadows nothing.
    """
    if str(ROOT / "bench") not in sys.path:
        sys.path.append(str(ROOT / "bench"))
    module_name = f"bench_{name.replace('/', '_')}"
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module
