"""`memctl mcp` arguments: a new token's config entry holds only its hash; bad flags fail early."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from memory_core.config import load_settings
from memory_core.mcp_server.auth import TokenTable
from tests.kit import forkserver
from tests.kit.mcp import server_env


def memctl(*args: str) -> subprocess.CompletedProcess[str]:
    return forkserver.run(
        [sys.executable, "-m", "memory_core.cli", *args],
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_new_token_prints_the_hash_entry_and_the_token_once(tmp_path: Path):
    out = memctl("mcp", "--new-token", "support-bot", "--tenant", "acme", "--subject", "ann")
    assert out.returncode == 0, out.stderr
    token = out.stderr.strip().rsplit(" ", 1)[-1]
    assert token not in out.stdout  # the config gets the hash, never the token
    config = tmp_path / "memctl.toml"
    config.write_text(out.stdout)
    entry = tomllib.loads(out.stdout)["mcp"]["tokens"][0]
    assert entry["name"] == "support-bot" and entry["tenant"] == "acme"
    table = TokenTable.from_config(load_settings(config_file=config).mcp)
    found = table.lookup(token)
    assert found is not None
    binding = found[1]
    assert (binding.tenant_id, binding.subject_id, binding.client) == ("acme", "ann", "support-bot")
    assert table.lookup(token + "x") is None


def test_bad_flags_are_one_line_errors(tmp_path: Path):
    cases = [
        (("mcp", "--home", str(tmp_path)), "bound to one tenant"),
        (("mcp", "--http", "localhost", "--home", str(tmp_path)), "must be HOST:PORT"),
        (("mcp", "--http", "127.0.0.1:8765", "--home", str(tmp_path)), "[[mcp.tokens]]"),
        (("mcp", "--new-token", "x"), "needs --tenant"),
    ]
    for args, text in cases:
        out = memctl(*args)
        assert out.returncode != 0, args
        assert text in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr, args
