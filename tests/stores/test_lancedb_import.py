"""lancedb imported without its REST namespace client's API until that is used
(stores/lancedb_import.py), in fresh interpreters: what a process has imported is global."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_OPEN_THEN_USE = """
import json, sys
from memory_core.stores.lance import LanceStore
store = LanceStore(sys.argv[1])
store.ensure_tables(4)
before = sorted(m for m in sys.modules if m.startswith("lance_namespace_urllib3_client.api"))
from lance_namespace_urllib3_client import ApiClient, TableApi
import lance_namespace_urllib3_client as package
after = sorted(m for m in sys.modules if m.startswith("lance_namespace_urllib3_client.api"))
names = sorted(n for n in vars(package) if not n.startswith("_"))
print(json.dumps({"tables": sorted(store.table_names()), "before": before, "after": after,
                  "client": ApiClient.__name__, "api": TableApi.__name__, "names": names}))
"""

_PLAIN = """
import json
import lance_namespace_urllib3_client as package
print(json.dumps(sorted(n for n in vars(package) if not n.startswith("_"))))
"""


def _run(code: str, *args: str) -> object:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_store_opens_without_the_namespace_api_and_the_api_loads_on_first_use(
    tmp_path: Path,
) -> None:
    got = _run(_OPEN_THEN_USE, str(tmp_path / "lance"))
    assert isinstance(got, dict)
    assert "episodes" in got["tables"]  # lancedb works: the tables were made
    assert got["before"] == []  # the generated API was not imported with lancedb
    assert "lance_namespace_urllib3_client.api.table_api" in got["after"]
    assert (got["client"], got["api"]) == ("ApiClient", "TableApi")
    # once used, the package holds every name its own import gives it
    assert got["names"] == _run(_PLAIN)
