"""One exception root: every public exception class defined in :mod:`stream_dp` derives from
:class:`stream_dp.errors.StreamDPError` and keeps its former base, so existing ``except`` clauses still match.

Found by importing every module of the package (``pkgutil.walk_packages``), not from a list: a new exception
class that forgets the root fails here. Private classes (``_Name``) are control flow caught in their own module
and never reach a caller, so they are left out.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import types
from pathlib import Path

import stream_dp
from stream_dp.errors import StreamDPError

ROOT = Path(__file__).resolve().parents[2]


def defined_exceptions(modules: list[types.ModuleType]) -> list[type[BaseException]]:
    """The exception classes each module defines (not those it imports)."""
    return [obj for module in modules for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__]


def unrooted(classes: list[type[BaseException]]) -> list[str]:
    """The public ones that do not derive from the root."""
    return sorted(f"{c.__module__}.{c.__qualname__}" for c in classes
                  if not c.__name__.startswith("_") and not issubclass(c, StreamDPError))


def package_modules() -> list[types.ModuleType]:
    names = [m.name for m in pkgutil.walk_packages(stream_dp.__path__, "stream_dp.")
             if not m.name.endswith("__main__")]  # `python -m stream_dp.cli` runs the CLI on import
    return [importlib.import_module(name) for name in names]


def test_every_public_exception_class_derives_from_the_root():
    classes = defined_exceptions(package_modules())
    assert len(classes) >= 30, [c.__name__ for c in classes]  # the walk sees the package's real classes
    assert unrooted(classes) == []


def test_the_walk_catches_an_exception_class_without_the_root():  # broken variant: a class re-based on RuntimeError only
    module = types.ModuleType("stream_dp.fake")
    exec("class Forgotten(RuntimeError):\n    pass\nclass _Internal(Exception):\n    pass\n", module.__dict__)
    assert unrooted(defined_exceptions([module])) == ["stream_dp.fake.Forgotten"]


def test_re_based_classes_keep_their_former_base():
    """``except ValueError`` / ``ConnectionError`` / ``KafkaError`` written before the root still match."""
    from kafka.errors import KafkaError

    from stream_dp.broker_reach import BrokerUnreachable
    from stream_dp.config import ConfigError
    from stream_dp.dashboard.server import PortTaken
    from stream_dp.ingest.consumers import BrokersUnreachable
    from stream_dp.node_batches import SlotMoved
    from stream_dp.schedule import ScheduleMismatch

    assert issubclass(ConfigError, ValueError) and issubclass(ScheduleMismatch, ConfigError)
    assert issubclass(BrokerUnreachable, ConnectionError) and issubclass(PortTaken, OSError)
    assert issubclass(BrokersUnreachable, KafkaError)
    import redis
    assert issubclass(SlotMoved, redis.ConnectionError)
    assert str(ConfigError("kafka.bootstrap_servers: empty")) == "kafka.bootstrap_servers: empty"


def test_the_root_module_imports_nothing():
    """The pure mechanisms raise through it, so it must not load I/O or settings code."""
    tree = ast.parse((ROOT / "stream_dp" / "errors.py").read_text(encoding="utf-8"))
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [getattr(n, "module", None) for n in imports] == ["__future__"]


NUMPY_ONLY = """
import importlib, pkgutil, sys
import stream_dp.mechanisms as mechanisms
for info in pkgutil.walk_packages(mechanisms.__path__, "stream_dp.mechanisms."):
    importlib.import_module(info.name)
import stream_dp.accounting.budget, stream_dp.accounting.composition, stream_dp.accounting.events
print(sorted({name.split(".")[0] for name in sys.modules} & {"pydantic", "pydantic_settings", "redis", "kafka"}))
"""


def test_the_numpy_only_mechanisms_and_the_budget_arithmetic_load_no_settings_or_io_code():
    """``accounting/budget.py`` raises :class:`~stream_dp.errors.ConfigError` for a budget smaller than one
    release; the class lives in the exception root, so the mechanisms and the budget arithmetic load neither
    pydantic nor a client library (tried: with budget.py importing ``stream_dp.config.ConfigError`` again, as it
    did, this prints ['pydantic', 'pydantic_settings'])."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", NUMPY_ONLY], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_config_error_is_one_class_under_both_names():
    from stream_dp.config import ConfigError as from_config
    from stream_dp.errors import ConfigError

    assert from_config is ConfigError and issubclass(ConfigError, ValueError) and issubclass(ConfigError, StreamDPError)
